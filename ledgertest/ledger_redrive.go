package ledgertest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testRedrive checks ledger.Redriver: what ended badly is sent again as a
// new Offered delivery linked to the original, which keeps its end; once
// per record; by ID and by filter. A store that does not implement
// Redriver skips the group: redrive is optional.
func testRedrive(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"FailedBecomesANewOfferedDeliveryLinkedToIt", redriveFailedBecomesNewOffered},
		{"ExpiredOfAnyCauseIsRedriven", redriveExpiredOfAnyCause},
		{"OpenIsWrongStateAndWritesNothing", redriveOpenIsWrongState},
		{"ProcessedIsWrongState", redriveProcessedIsWrongState},
		{"TwiceIsRepeatedWithTheSameRecord", redriveTwiceIsRepeated},
		{"ConcurrentRedrivesMakeOneRecord", redriveConcurrentMakesOneRecord},
		{"AnotherNewIDAfterwardsIsConflict", redriveAnotherNewIDIsConflict},
		{"CallerChoosesTheNewID", redriveCallerChoosesTheNewID},
		{"TakenNewIDIsConflictAndWritesNothing", redriveTakenNewIDIsConflict},
		{"TakenNewIDIsConflictWhileTheDerivedIDIsFree", redriveTakenNewIDDerivedFree},
		{"UnknownIDIsNotFound", redriveUnknownIsNotFound},
		{"HistoryOfBothRecordsNamesTheOther", redriveHistoryNamesTheOther},
		{"ARedriveCanBeRedriven", redriveARedriveCanBeRedriven},
		{"LongIDGetsAValidDerivedID", redriveLongIDGetsAValidDerivedID},
		{"KeepsTheTargetItWasMovedTo", redriveKeepsTheFollowedTarget},
		{"InvalidIsRejected", redriveInvalidIsRejected},
		{"MatchingFiltersByStateTargetAndEnd", redriveMatchingFilters},
		{"MatchingIsOldestEndedFirstAndBounded", redriveMatchingOldestFirstAndBounded},
		{"MatchingSkipsWhatWasRedriven", redriveMatchingSkipsRedriven},
		{"MatchingReportsATakenIDAndMovesOn", redriveMatchingReportsTakenID},
		{"MatchingInvalidIsRejected", redriveMatchingInvalidIsRejected},
	})
}

// redriver returns the ledger's Redriver, skipping the test when it has
// none.
func (f *ledgerFixture) redriver() ledger.Redriver {
	f.t.Helper()
	r, ok := f.l.(ledger.Redriver)
	if !ok {
		f.t.Skipf("%T does not implement ledger.Redriver: redrive is optional", f.l)
	}
	return r
}

// redriveMetadata is the metadata of the records the redrive rules end:
// a redrive copies it to the new record, trace context included.
var redriveMetadata = ledger.Metadata{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}

// failedAt enqueues id on target at t0 and fails it for good at ended.
func (f *ledgerFixture) failedAt(id ledger.DeliveryID, target ledger.Target, ended time.Time) ledger.Delivery {
	f.t.Helper()
	r := req(id, target)
	r.Metadata = redriveMetadata // a redrive keeps it
	f.enqueue(r, t0)
	l := f.leaseOne(id, ownerA, ended)
	return f.applied(f.get(id), ended)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "no such mailbox", Permanent: true}, ended))
}

// redrive calls Redrive and requires no error.
func (f *ledgerFixture) redrive(r ledger.RedriveRequest, now time.Time) ledger.RedriveResult {
	f.t.Helper()
	res, err := f.redriver().Redrive(f.ctx, r, now)
	require.NoError(f.t, err, "Redrive %s", r.ID)
	require.Equal(f.t, res.Outcome == ledger.OutcomeApplied, res.Applied())
	return res
}

// requireRedriven checks an applied redrive of before at now as newID:
// the original keeps its end and names the new delivery, which starts
// afresh with the original's content; both are stored as returned.
func (f *ledgerFixture) requireRedriven(before ledger.Delivery, res ledger.RedriveResult, newID ledger.DeliveryID, now time.Time) {
	f.t.Helper()
	now = ledger.Normalize(now)
	require.Equal(f.t, ledger.OutcomeApplied, res.Outcome)
	want := before
	want.RedrivenTo = newID
	want.Version++
	want.UpdatedAt = now
	require.Equal(f.t, want, res.Original, "the original keeps its end and names the new delivery")
	require.Equal(f.t, res.Original, f.get(before.ID))
	fresh := ledger.Delivery{
		ID: newID, Target: before.Target, Ceremony: before.Ceremony, Payload: before.Payload, Policy: before.Policy,
		Metadata: before.Metadata,
		State:    ledger.DeliveryStateOffered, AvailableAt: now, CreatedAt: now, UpdatedAt: now, Version: 1,
		RedrivenFrom: before.ID,
	}
	require.Equal(f.t, fresh, res.Redriven, "the new delivery starts afresh with the original's content")
	require.Equal(f.t, res.Redriven, f.get(newID))
}

// requireRedriveNotApplied checks a redrive of before that answered want:
// nothing written, the original as it stands in the result.
func (f *ledgerFixture) requireRedriveNotApplied(before ledger.Delivery, res ledger.RedriveResult, want ledger.Outcome) {
	f.t.Helper()
	require.Equal(f.t, want, res.Outcome)
	require.False(f.t, res.Applied())
	require.Empty(f.t, res.Abandoned)
	require.Equal(f.t, before, res.Original, "a redrive that does not apply returns the original as it stands")
	require.Equal(f.t, before, f.get(before.ID), "a redrive that does not apply writes nothing")
}

func redriveFailedBecomesNewOffered(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerA, at(time.Second))
	failed := f.applied(f.get("d-1"), at(2*time.Second))(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "gone", Permanent: true}, at(2*time.Second)))
	now := at(time.Hour)
	res := f.redrive(ledger.RedriveRequest{ID: "d-1"}, now)
	f.requireRedriven(failed, res, storekit.RedriveID("d-1"), now)
	require.Equal(t, ledger.DeliveryID("d-1/redrive"), res.Redriven.ID, "the derived ID shows where it came from")
	require.Equal(t, ledger.DeliveryStateFailed, res.Original.State)
	require.Equal(t, failed.LastFailure, res.Original.LastFailure)
	require.Equal(t, failed.EndedAt, res.Original.EndedAt, "the original keeps its end")
	require.Equal(t, []ledger.DeliveryID{"d-1/redrive"}, f.leaseIDs(ledger.LeaseFilter{}, ownerB, now, 10),
		"the new delivery is offered at once; the original never again")
}

func redriveExpiredOfAnyCause(t *testing.T, f *ledgerFixture) {
	f.abandoned("bounded", t0, at(time.Second))
	f.enqueue(ceremonyReq("ceremony", "cer-1"), t0)
	f.expireCeremony("cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at(time.Second), "ceremony")
	f.acknowledged("lapsed", "host-1", ownerA, t0)
	f.expire(at(time.Hour), "lapsed")
	for _, id := range []ledger.DeliveryID{"bounded", "ceremony", "lapsed"} {
		before := f.requireState(id, ledger.DeliveryStateExpired)
		now := at(2 * time.Hour)
		f.requireRedriven(before, f.redrive(ledger.RedriveRequest{ID: id}, now), storekit.RedriveID(id), now)
	}
}

func redriveOpenIsWrongState(t *testing.T, f *ledgerFixture) {
	f.acknowledged("acked", "host-1", ownerA, t0)
	f.enqueue(req("leased", "host-1"), t0)
	f.leaseOne("leased", ownerA, t0)
	f.enqueue(req("offered", "host-1"), t0)
	for _, id := range []ledger.DeliveryID{"offered", "leased", "acked"} {
		before := f.get(id)
		f.requireRedriveNotApplied(before, f.redrive(ledger.RedriveRequest{ID: id}, at(time.Second)), ledger.OutcomeWrongState)
		f.requireAbsent(storekit.RedriveID(id))
		f.requireRedriveNotApplied(before, f.redrive(ledger.RedriveRequest{ID: id, NewID: "chosen"}, at(time.Second)), ledger.OutcomeWrongState)
		f.requireAbsent("chosen")
	}
}

func redriveProcessedIsWrongState(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	before := f.process("d-1", ownerA, nil, t0)
	f.requireRedriveNotApplied(before, f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Second)), ledger.OutcomeWrongState)
	f.requireAbsent(storekit.RedriveID("d-1"))
}

func redriveTwiceIsRepeated(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	first := f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Second))
	require.True(t, first.Applied())
	// The new delivery moves on; a repeat answers it as it now stands.
	f.leaseOne(first.Redriven.ID, ownerB, at(2*time.Second))
	original, redriven := f.get("d-1"), f.get(first.Redriven.ID)
	for _, r := range []ledger.RedriveRequest{{ID: "d-1"}, {ID: "d-1", NewID: first.Redriven.ID}} {
		again := f.redrive(r, at(time.Hour))
		f.requireRedriveNotApplied(original, again, ledger.OutcomeRepeated)
		require.Equal(t, redriven, again.Redriven, "a repeat answers the delivery the first redrive made")
		f.requireUnchanged(redriven)
	}
	f.requireAbsent(storekit.RedriveID(first.Redriven.ID))
}

func redriveAnotherNewIDIsConflict(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	first := f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Second))
	original := f.get("d-1")
	again := f.redrive(ledger.RedriveRequest{ID: "d-1", NewID: "d-1-other"}, at(time.Hour))
	f.requireRedriveNotApplied(original, again, ledger.OutcomeConflict)
	require.Equal(t, ledger.Delivery{}, again.Redriven)
	f.requireAbsent("d-1-other")
	f.requireUnchanged(first.Redriven)
}

func redriveCallerChoosesTheNewID(t *testing.T, f *ledgerFixture) {
	failed := f.failedAt("d-1", "host-1", t0)
	now := at(time.Minute)
	f.requireRedriven(failed, f.redrive(ledger.RedriveRequest{ID: "d-1", NewID: "d-1-retry"}, now), "d-1-retry", now)
	f.requireAbsent(storekit.RedriveID("d-1"))
}

func redriveTakenNewIDIsConflict(t *testing.T, f *ledgerFixture) {
	failed := f.failedAt("d-1", "host-1", t0)
	taken := f.enqueue(req("d-1/redrive", "host-2"), t0)
	chosen := f.enqueue(req("chosen", "host-2"), t0)
	for _, r := range []ledger.RedriveRequest{{ID: "d-1"}, {ID: "d-1", NewID: "chosen"}} {
		res := f.redrive(r, at(time.Second))
		f.requireRedriveNotApplied(failed, res, ledger.OutcomeConflict)
		require.Equal(t, ledger.Delivery{}, res.Redriven)
	}
	f.requireUnchanged(taken)
	f.requireUnchanged(chosen)
}

// redriveTakenNewIDDerivedFree: the ID checked for "taken" is the
// caller's NewID, not the one the store would derive: with only the
// NewID taken, a store that checked the derived ID would write a second
// record under the taken ID (or fail on its key).
func redriveTakenNewIDDerivedFree(t *testing.T, f *ledgerFixture) {
	failed := f.failedAt("d-1", "host-1", t0)
	chosen := f.enqueue(req("chosen", "host-2"), t0)
	res := f.redrive(ledger.RedriveRequest{ID: "d-1", NewID: "chosen"}, at(time.Second))
	f.requireRedriveNotApplied(failed, res, ledger.OutcomeConflict)
	require.Equal(t, ledger.Delivery{}, res.Redriven)
	f.requireUnchanged(chosen)
	f.requireAbsent(storekit.RedriveID("d-1"))
}

func redriveUnknownIsNotFound(t *testing.T, f *ledgerFixture) {
	res := f.redrive(ledger.RedriveRequest{ID: "d-unknown"}, t0)
	require.Equal(t, ledger.OutcomeNotFound, res.Outcome)
	require.Equal(t, ledger.RedriveResult{Outcome: ledger.OutcomeNotFound}, res)
	f.requireAbsent(storekit.RedriveID("d-unknown"))
}

func redriveHistoryNamesTheOther(t *testing.T, f *ledgerFixture) {
	f.historian()
	f.failedAt("d-1", "host-1", at(time.Second))
	before := f.history("d-1")
	now := at(time.Minute)
	res := f.redrive(ledger.RedriveRequest{ID: "d-1", NewID: "d-2"}, now)
	require.True(t, res.Applied())
	f.requireHistory("d-1", append(before, step(ledger.OpRedrive, failed, failed, nobody, "redriven as d-2", now))...)
	f.requireHistory("d-2", step(ledger.OpRedrive, "", offered, nobody, "redriven from d-1", now))
	// A repeat, and a refused redrive, add nothing to either history.
	f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Hour))
	f.redrive(ledger.RedriveRequest{ID: "d-2"}, at(time.Hour))
	require.Len(t, f.history("d-1"), len(before)+1)
	require.Len(t, f.history("d-2"), 1)
}

func redriveARedriveCanBeRedriven(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	first := f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Second)).Redriven
	l := f.leaseOne(first.ID, ownerA, at(2*time.Second))
	ended := f.applied(f.get(first.ID), at(3*time.Second))(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, at(3*time.Second)))
	now := at(time.Minute)
	res := f.redrive(ledger.RedriveRequest{ID: first.ID}, now)
	f.requireRedriven(ended, res, "d-1/redrive/redrive", now)
	require.Equal(t, ledger.DeliveryID("d-1"), res.Original.RedrivenFrom, "the chain keeps every link")
	require.Equal(t, ledger.DeliveryID("d-1/redrive/redrive"), res.Original.RedrivenTo)
}

func redriveLongIDGetsAValidDerivedID(t *testing.T, f *ledgerFixture) {
	for _, id := range []ledger.DeliveryID{
		ledger.DeliveryID(strings.Repeat("a", ledger.MaxNameBytes)),
		ledger.DeliveryID("a" + strings.Repeat("é", ledger.MaxNameBytes/2)), // a 2-byte character across the cut
	} {
		failed := f.failedAt(id, "host-1", t0)
		newID := storekit.RedriveID(id)
		require.NoError(t, storekit.ValidateName("new id", string(newID)))
		require.NotEqual(t, id, newID)
		f.requireRedriven(failed, f.redrive(ledger.RedriveRequest{ID: id}, at(time.Second)), newID, at(time.Second))
	}
}

func redriveKeepsTheFollowedTarget(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-old"), t0)
	res, err := f.l.Supersede(f.ctx, "host-old", "host-new", ledger.Follow, at(time.Second))
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Moved)
	l := f.leaseOne("d-1", ownerA, at(2*time.Second))
	failed := f.applied(f.get("d-1"), at(3*time.Second))(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, at(3*time.Second)))
	require.Equal(t, ledger.Target("host-old"), failed.EnqueuedTarget)
	now := at(time.Minute)
	redriven := f.redrive(ledger.RedriveRequest{ID: "d-1"}, now).Redriven
	require.Equal(t, ledger.Target("host-new"), redriven.Target, "the new delivery goes where the work went")
	require.Empty(t, redriven.EnqueuedTarget)
}

func redriveInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	before := f.all()
	r := f.redriver()
	for name, call := range map[string]func() error{
		"empty id": func() error { _, err := r.Redrive(f.ctx, ledger.RedriveRequest{}, t0); return err },
		"bad new id": func() error {
			_, err := r.Redrive(f.ctx, ledger.RedriveRequest{ID: "d-1", NewID: "a\x00b"}, t0)
			return err
		},
		"zero now":    func() error { _, err := r.Redrive(f.ctx, ledger.RedriveRequest{ID: "d-1"}, time.Time{}); return err },
		"nil context": func() error { _, err := r.Redrive(nilContext(), ledger.RedriveRequest{ID: "d-1"}, t0); return err },
		"long new id": func() error {
			_, err := r.Redrive(f.ctx, ledger.RedriveRequest{ID: "d-1", NewID: ledger.DeliveryID(strings.Repeat("x", 256))}, t0)
			return err
		},
		"control char": func() error { _, err := r.Redrive(f.ctx, ledger.RedriveRequest{ID: "d-1\n"}, t0); return err },
	} {
		requireInvalid(t, call())
		require.Equal(t, before, f.all(), "%s: a rejected call writes nothing", name)
	}
	_, err := r.Redrive(cancelledContext(t), ledger.RedriveRequest{ID: "d-1"}, t0)
	require.Error(t, err)
	require.Equal(t, before, f.all())
}

// redriveAll follows RedriveMatching's cursor to the end with q and
// returns every result, in order.
func (f *ledgerFixture) redriveAll(q ledger.RedriveQuery, now time.Time) []ledger.RedriveResult {
	f.t.Helper()
	var out []ledger.RedriveResult
	for range 1000 {
		b, err := f.redriver().RedriveMatching(f.ctx, q, now)
		require.NoError(f.t, err)
		require.LessOrEqual(f.t, len(b.Results), q.Limit, "a batch examines at most Limit deliveries")
		require.Equal(f.t, len(b.Results) == q.Limit, b.Next != "", "Next is set exactly when the batch is full")
		out = append(out, b.Results...)
		if b.Next == "" {
			return out
		}
		q.Cursor = b.Next
	}
	f.t.Fatal("RedriveMatching never reached its end")
	return nil
}

// redrivenIDs returns the originals of the results, in order.
func redrivenIDs(rs []ledger.RedriveResult) []ledger.DeliveryID {
	var out []ledger.DeliveryID
	for _, r := range rs {
		out = append(out, r.Original.ID)
	}
	return out
}

func redriveMatchingFilters(t *testing.T, f *ledgerFixture) {
	f.failedAt("fail-1-early", "host-1", at(time.Minute))
	f.failedAt("fail-2-early", "host-2", at(time.Minute))
	f.failedAt("fail-1-late", "host-1", at(time.Hour))
	f.abandoned("exp-1-early", t0, at(time.Minute))
	f.acknowledged("acked", "host-1", ownerA, t0)
	f.acknowledged("done", "host-1", ownerA, t0)
	f.process("done", ownerA, nil, at(time.Minute))
	f.enqueue(req("open", "host-1"), t0)
	early := f.get("fail-1-early")
	untouched := map[ledger.DeliveryID]ledger.Delivery{}
	for _, id := range []ledger.DeliveryID{"fail-2-early", "fail-1-late", "exp-1-early", "acked", "done", "open"} {
		untouched[id] = f.get(id)
	}
	now := at(2 * time.Hour)
	q := ledger.RedriveQuery{States: []ledger.DeliveryState{ledger.DeliveryStateFailed}, Targets: []ledger.Target{"host-1"}, EndedBefore: at(30 * time.Minute), Limit: 10}
	res := f.redriveAll(q, now)
	require.Equal(t, []ledger.DeliveryID{"fail-1-early"}, redrivenIDs(res))
	f.requireRedriven(early, res[0], storekit.RedriveID("fail-1-early"), now)
	for _, d := range untouched {
		f.requireUnchanged(d)
	}
	// No filter: everything that ended badly and was not redriven.
	res = f.redriveAll(ledger.RedriveQuery{Limit: 10}, now)
	require.Equal(t, []ledger.DeliveryID{"exp-1-early", "fail-2-early", "fail-1-late"}, redrivenIDs(res))
	for _, r := range res {
		require.True(t, r.Applied(), r.Original.ID)
	}
	f.requireUnchanged(untouched["acked"])
	f.requireUnchanged(untouched["done"])
	f.requireUnchanged(untouched["open"])
}

func redriveMatchingOldestFirstAndBounded(t *testing.T, f *ledgerFixture) {
	// Ended at distinct times in an order that is not ID order, and two at
	// the same instant, ordered by ID.
	ends := map[ledger.DeliveryID]time.Duration{"d-c": 1, "d-a": 3, "d-e": 2, "d-b": 2, "d-d": 5}
	for id, m := range ends {
		f.failedAt(id, "host-1", at(m*time.Minute))
	}
	now := at(time.Hour)
	b, err := f.redriver().RedriveMatching(f.ctx, ledger.RedriveQuery{Limit: 2}, now)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-c", "d-b"}, redrivenIDs(b.Results))
	require.NotEmpty(t, b.Next)
	require.Equal(t, 2, b.Redriven())
	f.requireNotRedriven("d-e")
	rest := f.redriveAll(ledger.RedriveQuery{Limit: 2, Cursor: b.Next}, now)
	require.Equal(t, []ledger.DeliveryID{"d-e", "d-a", "d-d"}, redrivenIDs(rest))
	require.Empty(t, f.redriveAll(ledger.RedriveQuery{Limit: 2}, now), "everything was redriven")
}

// requireNotRedriven requires that id was not redriven.
func (f *ledgerFixture) requireNotRedriven(id ledger.DeliveryID) {
	f.t.Helper()
	require.Empty(f.t, f.get(id).RedrivenTo, "%s must not be redriven", id)
	f.requireAbsent(storekit.RedriveID(id))
}

func redriveMatchingSkipsRedriven(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", at(time.Minute))
	f.failedAt("d-2", "host-1", at(2*time.Minute))
	f.redrive(ledger.RedriveRequest{ID: "d-1"}, at(time.Hour))
	res := f.redriveAll(ledger.RedriveQuery{Limit: 10}, at(time.Hour))
	require.Equal(t, []ledger.DeliveryID{"d-2"}, redrivenIDs(res))
	require.Empty(t, f.redriveAll(ledger.RedriveQuery{Limit: 10}, at(2*time.Hour)))
}

func redriveMatchingReportsTakenID(t *testing.T, f *ledgerFixture) {
	blocked := f.failedAt("d-1", "host-1", at(time.Minute))
	f.failedAt("d-2", "host-1", at(2*time.Minute))
	taken := f.enqueue(req("d-1/redrive", "host-2"), t0)
	now := at(time.Hour)
	b, err := f.redriver().RedriveMatching(f.ctx, ledger.RedriveQuery{Limit: 1}, now)
	require.NoError(t, err)
	require.Len(t, b.Results, 1)
	f.requireRedriveNotApplied(blocked, b.Results[0], ledger.OutcomeConflict)
	f.requireUnchanged(taken)
	rest := f.redriveAll(ledger.RedriveQuery{Limit: 1, Cursor: b.Next}, now)
	require.Equal(t, []ledger.DeliveryID{"d-2"}, redrivenIDs(rest), "the cursor moves past a delivery it could not redrive")
	require.True(t, rest[0].Applied())
}

func redriveMatchingInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	before := f.all()
	r := f.redriver()
	for name, q := range map[string]ledger.RedriveQuery{
		"processed state": {States: []ledger.DeliveryState{ledger.DeliveryStateProcessed}, Limit: 1},
		"open state":      {States: []ledger.DeliveryState{ledger.DeliveryStateOffered}, Limit: 1},
		"unknown state":   {States: []ledger.DeliveryState{"lost"}, Limit: 1},
		"zero limit":      {Limit: 0},
		"limit too high":  {Limit: ledger.MaxLimit + 1},
		"bad target":      {Targets: []ledger.Target{""}, Limit: 1},
		"bad cursor":      {Limit: 1, Cursor: "not-a-cursor"},
		"list cursor":     {Limit: 1, Cursor: storekit.EncodeCursor("d-1")},
		"ended too early": {Limit: 1, EndedBefore: time.Unix(-1, 0)},
	} {
		_, err := r.RedriveMatching(f.ctx, q, t0)
		requireInvalid(t, err)
		require.Equal(t, before, f.all(), "%s: a rejected call writes nothing", name)
	}
	_, err := r.RedriveMatching(f.ctx, ledger.RedriveQuery{Limit: 1}, time.Time{})
	requireInvalid(t, err)
	require.Equal(t, before, f.all())
}
