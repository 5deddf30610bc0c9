package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testHistory checks ledger.Historian: every applied transition of a
// delivery, and only those, leaves one entry in its history, written with
// the change, saying what moved the record from which state to which, for
// whom, why and when. A ledger that does not implement Historian skips the
// group: history is optional.
func testHistory(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"ScriptedLife", historyScriptedLife},
		{"ReleaseRenewAndActivation", historyReleaseRenewAndActivation},
		{"PermanentFailure", historyPermanentFailure},
		{"IncarnationRuleIsAReclaim", historyIncarnationRuleIsAReclaim},
		{"ExpiredLeaseTakenOver", historyExpiredLeaseTakenOver},
		{"ExpireRecordsWhy", historyExpireRecordsWhy},
		{"AbandonAndCeremonyRecordTheirCause", historyAbandonAndCeremony},
		{"OperatorCallsRecordTheActorOfTheirContext", historyActorOfTheContext},
		{"Supersede", historySupersede},
		{"BatchEnqueueCreates", historyBatchEnqueueCreates},
		{"CallsThatDoNotApplyAddNothing", historyNotAppliedAddsNothing},
		{"UnknownIsNotFound", historyUnknownIsNotFound},
		{"InvalidIsRejected", historyInvalidIsRejected},
		{"PurgeTakesTheHistory", historyPurgeTakesTheHistory},
		{"ConcurrentWorkKeepsEveryHistoryWhole", historyConcurrentWork},
	})
}

// historian returns the ledger's Historian, skipping the test when it has
// none.
func (f *ledgerFixture) historian() ledger.Historian {
	f.t.Helper()
	h, ok := f.l.(ledger.Historian)
	if !ok {
		f.t.Skipf("%T does not implement ledger.Historian: history is optional", f.l)
	}
	return h
}

// history returns the history of id with its times normalised, after
// checking that it is numbered 1, 2, 3... and that its last entry is the
// record's latest version.
func (f *ledgerFixture) history(id ledger.DeliveryID) []ledger.Transition {
	f.t.Helper()
	h, err := f.historian().History(f.ctx, id)
	require.NoError(f.t, err, "History %s", id)
	for i := range h {
		h[i].At = ledger.Normalize(h[i].At)
		require.Equal(f.t, int64(i+1), h[i].Seq, "history of %s is numbered from 1 without gaps", id)
	}
	require.NotEmpty(f.t, h, "a delivery has at least its creation in its history")
	require.Equal(f.t, f.get(id).Version, h[len(h)-1].Seq,
		"every applied transition bumps Version by one and leaves one entry")
	return h
}

// requireHistory requires the history of id to be want, numbered from 1.
func (f *ledgerFixture) requireHistory(id ledger.DeliveryID, want ...ledger.Transition) {
	f.t.Helper()
	for i := range want {
		want[i].Seq = int64(i + 1)
	}
	require.Equal(f.t, want, f.history(id), "history of %s", id)
}

// step is an expected history entry (numbered by requireHistory).
func step(op ledger.Operation, from, to ledger.DeliveryState, actor ledger.Owner, reason string, now time.Time) ledger.Transition {
	t := ledger.Transition{
		Op: op, From: string(from), To: string(to), Outcome: ledger.OutcomeApplied,
		Reason: reason, At: ledger.Normalize(now),
	}
	if actor != (ledger.Owner{}) {
		t.Actor = actor.String()
	}
	return t
}

// created is the entry a delivery enqueued at now starts its history with.
func created(now time.Time) ledger.Transition {
	return step(ledger.OpEnqueue, "", ledger.DeliveryStateOffered, ledger.Owner{}, "", now)
}

// nobody stands for "no actor" in the expected entries.
var nobody = ledger.Owner{}

const (
	offered      = ledger.DeliveryStateOffered
	leasedState  = ledger.DeliveryStateLeased
	acknowledged = ledger.DeliveryStateAcknowledged
	processed    = ledger.DeliveryStateProcessed
	failed       = ledger.DeliveryStateFailed
	expired      = ledger.DeliveryStateExpired
)

func historyScriptedLife(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, at(time.Second))
	d := f.applied(f.get("d-1"), at(2*time.Second))(f.l.MarkFailed(f.ctx, l1, ledger.FailureReason{Message: "boom"}, at(2*time.Second)))
	// The backoff after the first attempt is at most BackoffBase.
	again := at(2*time.Second + testPolicy().BackoffBase)
	require.False(t, d.AvailableAt.After(again))
	l2 := f.leaseOne("d-1", ownerA, again)
	f.applied(f.get("d-1"), again.Add(time.Second))(f.l.Acknowledge(f.ctx, l2, "seen", again.Add(time.Second)))
	f.process("d-1", ownerA, nil, again.Add(2*time.Second))
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", at(time.Second)),
		step(ledger.OpMarkFailed, leasedState, offered, ownerA, "reported: boom", at(2*time.Second)),
		step(ledger.OpLease, offered, leasedState, ownerA, "", again),
		step(ledger.OpAcknowledge, leasedState, acknowledged, ownerA, "", again.Add(time.Second)),
		step(ledger.OpMarkProcessed, acknowledged, processed, ownerA, "", again.Add(2*time.Second)),
	)
}

func historyReleaseRenewAndActivation(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	want := []ledger.Transition{created(t0), step(ledger.OpLease, offered, leasedState, ownerA, "", t0)}
	if r, ok := f.l.(ledger.Renewer); ok {
		f.applied(f.get("d-1"), at(time.Second))(r.RenewLease(f.ctx, l, at(time.Second), leaseFor))
		want = append(want, step(ledger.OpRenewLease, leasedState, leasedState, ownerA, "", at(time.Second)))
	}
	f.applied(f.get("d-1"), at(2*time.Second))(f.l.Release(f.ctx, l, at(2*time.Second)))
	activation := ledger.Activation{Result: ledger.ActivationUnreachable, Detail: "host asleep"}
	f.activate("d-1", activation, at(3*time.Second))
	want = append(want,
		step(ledger.OpRelease, leasedState, offered, ownerA, "", at(2*time.Second)),
		step(ledger.OpRecordActivation, offered, offered, nobody, "", at(3*time.Second)),
	)
	f.requireHistory("d-1", want...)
}

func historyPermanentFailure(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerB, t0)
	f.applied(f.get("d-1"), at(time.Second))(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "gone for good", Permanent: true}, at(time.Second)))
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerB, "", t0),
		step(ledger.OpMarkFailed, leasedState, failed, ownerB, "reported: gone for good", at(time.Second)),
	)
}

func historyIncarnationRuleIsAReclaim(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	last := req("d-last", "host-1")
	last.Policy.MaxAttempts = 1
	f.enqueue(last, t0)
	require.Len(t, f.leaseAll(ownerA, t0).Leased, 2)
	// The new incarnation takes both back; d-1 is granted to it again by
	// the same call, d-last has no attempt left and fails.
	res := f.lease(ledger.LeaseFilter{}, ownerA2, at(time.Second), leaseFor, ledger.MaxLimit)
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-last"}, res.Reclaimed)
	require.Len(t, res.Leased, 1)
	reason := "reclaimed: agent leased as incarnation " + ownerA2.Incarnation
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpReclaim, leasedState, offered, ownerA2, reason, at(time.Second)),
		step(ledger.OpLease, offered, leasedState, ownerA2, "", at(time.Second)),
	)
	f.requireHistory("d-last",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpReclaim, leasedState, failed, ownerA2, reason, at(time.Second)),
	)
}

func historyExpiredLeaseTakenOver(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.leaseOne("d-1", ownerB, l.ExpiresAt)
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpLease, leasedState, leasedState, ownerB, "lease_expired: lease expired", l.ExpiresAt),
	)
}

func historyExpireRecordsWhy(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-lease", "host-1"), t0)
	l := f.leaseOne("d-lease", ownerA, t0)
	last := req("d-last", "host-2")
	last.Policy.MaxAttempts = 1
	f.enqueue(last, t0)
	f.leaseOne("d-last", ownerA, t0)
	f.acknowledged("d-ack", "host-3", ownerB, t0)
	f.expire(l.ExpiresAt, "d-last", "d-lease")
	deadline := t0.Add(testPolicy().AckWindow)
	f.expire(deadline, "d-ack")
	f.requireHistory("d-lease",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpExpire, leasedState, offered, nobody, "lease_expired: lease expired", l.ExpiresAt),
	)
	f.requireHistory("d-last",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpExpire, leasedState, failed, nobody, "lease_expired: lease expired", l.ExpiresAt),
	)
	f.requireHistory("d-ack",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerB, "", t0),
		step(ledger.OpAcknowledge, leasedState, acknowledged, ownerB, "", t0),
		step(ledger.OpExpire, acknowledged, expired, nobody,
			"acknowledgement_lapsed: not processed by "+deadline.Format(time.RFC3339Nano), deadline),
	)
}

func historyAbandonAndCeremony(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.applied(f.get("d-1"), at(time.Second))(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "queue full"}, at(time.Second)))
	r := req("d-2", "host-1")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	f.leaseOne("d-2", ownerA, t0)
	f.expireCeremony("cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at(2*time.Second), "d-2")
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpAbandon, offered, expired, nobody, "queue_bounded: queue full", at(time.Second)),
	)
	f.requireHistory("d-2",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpExpireCeremony, leasedState, expired, nobody, "ceremony_ended", at(2*time.Second)),
	)
}

func historySupersede(t *testing.T, f *ledgerFixture) {
	// Lease hands out the smallest ID first among equal offer times.
	f.enqueueIDs("host-old", t0, "d-offered", "d-leased")
	f.leaseOne("d-leased", ownerA, t0)
	f.acknowledged("d-acked", "host-old", ownerA, t0)
	f.supersede(ledger.Follow, at(time.Second), []ledger.DeliveryID{"d-leased", "d-offered"}, nil)
	res, err := f.l.Supersede(f.ctx, "host-new", "host-3", ledger.LeaveBehind, at(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-leased", "d-offered"}, res.Ended)
	superseded := "superseded: replaced by host-3"
	f.requireHistory("d-offered",
		created(t0),
		step(ledger.OpSupersede, offered, offered, nobody, "", at(time.Second)),
		step(ledger.OpSupersede, offered, expired, nobody, superseded, at(2*time.Second)),
	)
	f.requireHistory("d-leased",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpSupersede, leasedState, offered, nobody, "", at(time.Second)),
		step(ledger.OpSupersede, offered, expired, nobody, superseded, at(2*time.Second)),
	)
	f.requireHistory("d-acked",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpAcknowledge, leasedState, acknowledged, ownerA, "", t0),
	)
}

func historyBatchEnqueueCreates(t *testing.T, f *ledgerFixture) {
	b, ok := f.l.(ledger.BatchEnqueuer)
	if !ok {
		t.Skipf("%T does not implement ledger.BatchEnqueuer", f.l)
	}
	reqs := []ledger.EnqueueRequest{req("d-1", "host-1"), req("d-2", "host-1"), req("d-1", "host-1")}
	res, err := b.EnqueueBatch(f.ctx, reqs, at(time.Second))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeRepeated, res[2].Outcome)
	f.requireHistory("d-1", created(at(time.Second)))
	f.requireHistory("d-2", created(at(time.Second)))
}

func historyNotAppliedAddsNothing(t *testing.T, f *ledgerFixture) {
	// d-fence sets the target's fence high-water mark to 5.
	f.acknowledged("d-fence", "host-1", ownerB, t0)
	f.process("d-fence", ownerB, ledger.FenceOf(5), t0)
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	stale := l
	stale.Token = "not-the-token"
	later := at(time.Second)
	unchanged := func() {
		t.Helper()
		f.requireHistory("d-1", created(t0), step(ledger.OpLease, offered, leasedState, ownerA, "", t0))
	}
	d := f.get("d-1")
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, stale, "", later))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, stale, ledger.FailureReason{}, later))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, stale, later))
	f.notApplied(d, ledger.OutcomeLeaseExpired)(f.l.Acknowledge(f.ctx, l, "", l.ExpiresAt))
	f.processedExpect(ledger.OutcomeWrongState, "d-1", ownerA, nil, later)
	if r, ok := f.l.(ledger.Renewer); ok {
		f.notApplied(d, ledger.OutcomeLeaseLost)(r.RenewLease(f.ctx, stale, later, leaseFor))
	}
	res, err := f.l.Enqueue(f.ctx, req("d-1", "host-1"), later)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeRepeated, res.Outcome)
	res, err = f.l.Enqueue(f.ctx, req("d-1", "host-2"), later)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeConflict, res.Outcome)
	f.requireNothingOffered(ledger.LeaseFilter{}, later)
	f.expire(later)
	f.expireCeremony("cer-none", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, later)
	sup, err := f.l.Supersede(f.ctx, "host-none", "host-1", ledger.Follow, later)
	require.NoError(t, err)
	require.False(t, sup.Applied())
	unchanged()

	// Acknowledged: a repeat and the wrong owner or fence write nothing.
	f.applied(f.get("d-1"), later)(f.l.Acknowledge(f.ctx, l, "seen", later))
	d = f.get("d-1")
	f.notApplied(d, ledger.OutcomeRepeated)(f.l.Acknowledge(f.ctx, l, "seen", later))
	f.notApplied(d, ledger.OutcomeWrongState)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, later))
	f.processedExpect(ledger.OutcomeWrongOwner, "d-1", ownerB, nil, later)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-1", ownerA, ledger.FenceOf(4), later)
	f.process("d-1", ownerA, ledger.FenceOf(5), at(2*time.Second))
	// Ended: nothing more is written.
	d = f.get("d-1")
	f.processedExpect(ledger.OutcomeRepeated, "d-1", ownerA, ledger.FenceOf(5), at(3*time.Second))
	f.notApplied(d, ledger.OutcomeEnded)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(3*time.Second)))
	f.notApplied(d, ledger.OutcomeEnded)(f.l.RecordActivation(f.ctx, "d-1", ledger.Activation{Result: ledger.ActivationDelivered}, at(3*time.Second)))
	f.notApplied(d, ledger.OutcomeEnded)(f.l.Release(f.ctx, l, at(3*time.Second)))
	f.notApplied(ledger.Delivery{ID: "missing"}, ledger.OutcomeNotFound)(f.l.Abandon(f.ctx, "missing", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(3*time.Second)))
	f.requireHistory("d-1",
		created(t0),
		step(ledger.OpLease, offered, leasedState, ownerA, "", t0),
		step(ledger.OpAcknowledge, leasedState, acknowledged, ownerA, "", later),
		step(ledger.OpMarkProcessed, acknowledged, processed, ownerA, "", at(2*time.Second)),
	)
}

func historyUnknownIsNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	_, err := f.historian().History(f.ctx, "missing")
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

func historyInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	h := f.historian()
	f.enqueue(req("d-1", "host-1"), t0)
	for _, id := range []ledger.DeliveryID{"", ledger.DeliveryID(strings.Repeat("x", ledger.MaxNameBytes+1)), "bad\xff", "ctl\n"} {
		_, err := h.History(f.ctx, id)
		requireInvalid(t, err)
	}
	_, err := h.History(nilContext(), "d-1")
	requireInvalid(t, err)
	_, err = h.History(cancelledContext(t), "d-1")
	require.ErrorIs(t, err, context.Canceled)
}

func historyPurgeTakesTheHistory(t *testing.T, f *ledgerFixture) {
	f.historian()
	p, ok := f.l.(ledger.Purger)
	if !ok {
		t.Skipf("%T does not implement ledger.Purger", f.l)
	}
	f.abandoned("d-1", t0, at(time.Second))
	n, err := p.PurgeDeliveries(f.ctx, at(time.Hour), ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = f.historian().History(f.ctx, "d-1")
	require.ErrorIs(t, err, ledger.ErrNotFound, "purging a delivery purges its history")
	f.enqueue(req("d-1", "host-1"), at(2*time.Hour))
	f.requireHistory("d-1", created(at(2*time.Hour)))
}

// historyConcurrentWork races workers over a ledger, each leasing and then
// acknowledging and processing, failing, releasing or dropping what it
// got, sometimes as a new incarnation of its agent, while a sweeper runs
// Expire. Afterwards every delivery's history must be one unbroken chain
// from its creation to its state, with one grant per lease sequence number.
func historyConcurrentWork(t *testing.T, f *ledgerFixture) {
	f.historian()
	const (
		deliveries = 60
		workers    = 8
		rounds     = 40
	)
	policy := testPolicy()
	policy.MaxAttempts = 4
	policy.BackoffBase = time.Microsecond
	policy.BackoffMax = 10 * time.Microsecond
	ids := make([]ledger.DeliveryID, deliveries)
	for i := range ids {
		ids[i] = ledger.DeliveryID(fmt.Sprintf("d-%03d", i))
		r := req(ids[i], ledger.Target(fmt.Sprintf("host-%d", i%3)))
		r.Policy = policy
		f.enqueue(r, t0)
	}
	var (
		clock    atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []error
	)
	now := func() time.Time { return t0.Add(time.Duration(clock.Add(3)) * time.Microsecond) }
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, err)
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			owner := ledger.Owner{Agent: fmt.Sprintf("agent-%d", w%4), Incarnation: fmt.Sprintf("boot-%d", w)}
			for round := range rounds {
				if round%10 == 9 {
					owner.Incarnation += "+"
				}
				res, err := f.l.Lease(f.ctx, ledger.LeaseFilter{}, owner, now(), 20*time.Microsecond, 1+rng.IntN(3))
				if err != nil {
					report(err)
					return
				}
				for _, ld := range res.Leased {
					var err error
					switch rng.IntN(5) {
					case 0, 1:
						if _, err = f.l.Acknowledge(f.ctx, ld.Lease, "seen", now()); err == nil {
							_, err = f.l.MarkProcessed(f.ctx, ld.Lease.DeliveryID, owner, nil, "done", now())
						}
					case 2:
						_, err = f.l.MarkFailed(f.ctx, ld.Lease, ledger.FailureReason{Message: "busy"}, now())
					case 3:
						_, err = f.l.Release(f.ctx, ld.Lease, now())
					}
					if err != nil {
						report(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range rounds {
			if _, err := f.l.Expire(f.ctx, now()); err != nil {
				report(err)
			}
		}
	})
	wg.Wait()
	require.Empty(t, problems)
	grants := 0
	for _, id := range ids {
		d := f.get(id)
		h := f.history(id) // numbered 1..n, the last Seq the record's Version
		require.Equal(t, created(t0), withoutSeq(h[0]), "%s starts with its creation", id)
		leases := int64(0)
		for i, tr := range h {
			require.Equal(t, ledger.OutcomeApplied, tr.Outcome)
			if i > 0 {
				require.Equal(t, h[i-1].To, tr.From, "%s: entry %d starts where entry %d ended", id, tr.Seq, tr.Seq-1)
			}
			if tr.Op == ledger.OpLease {
				leases++
			}
		}
		require.Equal(t, string(d.State), h[len(h)-1].To, "%s: the history ends in the record's state", id)
		require.Equal(t, ledger.Normalize(d.UpdatedAt), h[len(h)-1].At, "%s: the last entry is the last change", id)
		require.Equal(t, d.LeaseSeq, leases, "%s: one grant entry per lease sequence number", id)
		grants += int(leases)
	}
	require.Positive(t, grants, "the race granted nothing")
}

// withoutSeq returns t with Seq zero, to compare with an expected entry.
func withoutSeq(t ledger.Transition) ledger.Transition {
	t.Seq = 0
	return t
}

// historyActorOfTheContext: Abandon, ExpireCeremony and the redrives
// record the actor ledger.WithActor put in their context (a person at an
// operators' tool), and only for the calls made with it.
func historyActorOfTheContext(t *testing.T, f *ledgerFixture) {
	ctx, err := ledger.WithActor(f.ctx, "alice via ledgerctl")
	require.NoError(t, err)
	_, err = ledger.WithActor(f.ctx, "bad\x00actor")
	requireInvalid(t, err)
	require.Equal(t, "alice via ledgerctl", ledger.ActorFrom(ctx))
	f.enqueue(req("d-1", "host-1"), t0)
	f.applied(f.get("d-1"), at(time.Second))(f.l.Abandon(ctx, "d-1", ledger.Cause{Kind: "operator"}, at(time.Second)))
	r := req("d-2", "host-1")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	res, err := f.l.ExpireCeremony(ctx, "cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at(2*time.Second))
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-2"}, res.Changed)
	f.enqueue(req("d-3", "host-1"), t0)
	f.applied(f.get("d-3"), at(time.Second))(f.l.Abandon(f.ctx, "d-3", ledger.Cause{Kind: "operator"}, at(time.Second)))
	byAlice := func(t ledger.Transition) ledger.Transition { t.Actor = "alice via ledgerctl"; return t }
	f.requireHistory("d-1", created(t0), byAlice(step(ledger.OpAbandon, offered, expired, nobody, "operator", at(time.Second))))
	f.requireHistory("d-2", created(t0), byAlice(step(ledger.OpExpireCeremony, offered, expired, nobody, "ceremony_ended", at(2*time.Second))))
	f.requireHistory("d-3", created(t0), step(ledger.OpAbandon, offered, expired, nobody, "operator", at(time.Second)))

	rd, ok := f.l.(ledger.Redriver)
	if !ok {
		return
	}
	rr, err := rd.Redrive(ctx, ledger.RedriveRequest{ID: "d-1"}, at(3*time.Second))
	require.NoError(t, err)
	require.True(t, rr.Applied())
	h := f.history("d-1")
	require.Equal(t, ledger.OpRedrive, h[len(h)-1].Op)
	require.Equal(t, "alice via ledgerctl", h[len(h)-1].Actor, "a redrive names the actor of its context")
	b, err := rd.RedriveMatching(ctx, ledger.RedriveQuery{Limit: 10}, at(4*time.Second))
	require.NoError(t, err)
	require.Equal(t, 2, b.Redriven())
	for _, id := range []ledger.DeliveryID{"d-2", "d-3"} {
		h := f.history(id)
		require.Equal(t, "alice via ledgerctl", h[len(h)-1].Actor, "RedriveMatching names the actor of its context: %s", id)
	}
}
