package ledgertest

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testEnqueue checks Ledger.Enqueue and BatchEnqueuer.EnqueueBatch. The
// payload limit rules assume the store's default limit,
// ledger.DefaultMaxPayload.
func testEnqueue(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"NewIsApplied", enqueueNewIsApplied},
		{"AvailableAtDefaultsToNow", enqueueAvailableAtDefaultsToNow},
		{"AvailableAtLongAgoIsOfferedNow", enqueueAvailableAtLongAgo},
		{"PolicyDefaultsAreResolved", enqueuePolicyDefaultsAreResolved},
		{"SameContentIsRepeated", enqueueSameContentIsRepeated},
		{"RepeatedAfterTheRecordMovedOn", enqueueRepeatedAfterTheRecordMovedOn},
		{"RepeatedAfterAFollowSupersession", enqueueRepeatedAfterAFollowSupersession},
		{"DifferentContentIsConflict", enqueueDifferentContentIsConflict},
		{"NilAndEmptyPayloadAreTheSameContent", enqueueNilAndEmptyPayload},
		{"PayloadRoundTripsAnyBytes", enqueuePayloadRoundTripsAnyBytes},
		{"PayloadAtTheLimitIsAccepted", enqueuePayloadAtTheLimit},
		{"PayloadIsCopied", enqueuePayloadIsCopied},
		{"TimesAreNormalised", enqueueTimesAreNormalised},
		{"Batch/OutcomePerItem", enqueueBatchOutcomePerItem},
		{"Batch/DuplicateIDsAreJudgedAgainstTheEarlierItem", enqueueBatchDuplicateIDs},
		{"Batch/OneInvalidItemWritesNothing", enqueueBatchOneInvalidItemWritesNothing},
	})
}

// batcher returns the ledger's BatchEnqueuer. Every store this project
// ships implements it, so a ledger without it does not conform.
func (f *ledgerFixture) batcher() ledger.BatchEnqueuer {
	f.t.Helper()
	b, ok := f.l.(ledger.BatchEnqueuer)
	if !ok {
		f.t.Fatalf("%T does not implement ledger.BatchEnqueuer", f.l)
	}
	return b
}

func enqueueNewIsApplied(t *testing.T, f *ledgerFixture) {
	r := ledger.EnqueueRequest{
		ID: "d-1", Target: "host-1", Ceremony: "cer-1", Payload: []byte("hello"),
		Policy: testPolicy(), AvailableAt: at(time.Hour),
	}
	res, err := f.l.Enqueue(f.ctx, r, t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	require.True(t, res.Applied())

	d := res.Delivery
	require.Equal(t, r.ID, d.ID)
	require.Equal(t, r.Target, d.Target)
	require.Equal(t, r.Ceremony, d.Ceremony)
	require.Equal(t, r.Payload, d.Payload)
	require.Equal(t, testPolicy(), d.Policy)
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.Zero(t, d.Attempts)
	require.Zero(t, d.LeaseSeq)
	require.Nil(t, d.Lease)
	require.Nil(t, d.Ack)
	require.Nil(t, d.Processing)
	require.Nil(t, d.LastFailure)
	require.Nil(t, d.Cause)
	require.Zero(t, d.Activations)
	require.Equal(t, at(time.Hour), d.AvailableAt)
	require.Equal(t, t0, d.CreatedAt)
	require.Equal(t, t0, d.UpdatedAt)
	require.True(t, d.EndedAt.IsZero())
	require.Positive(t, d.Version)
	require.Equal(t, d, f.get(r.ID), "the result must carry the stored record")
}

func enqueueAvailableAtDefaultsToNow(t *testing.T, f *ledgerFixture) {
	d := f.enqueue(req("d-1", "host-1"), at(time.Minute))
	require.Equal(t, at(time.Minute), d.AvailableAt)
	require.Equal(t, at(time.Minute), d.CreatedAt)
}

func enqueuePolicyDefaultsAreResolved(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy = ledger.Policy{}
	d := f.enqueue(r, t0)
	require.Positive(t, d.Policy.MaxAttempts)
	require.Positive(t, d.Policy.BackoffBase)
	require.GreaterOrEqual(t, d.Policy.BackoffMax, d.Policy.BackoffBase)
	require.Positive(t, d.Policy.AckWindow)

	// Content compares resolved policies: the defaults spelled out are the
	// same content as the zero policy.
	r.Policy = d.Policy
	f.notApplied(d, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(time.Second)))

	// Fields given explicitly are kept; only zero ones take the defaults.
	p := req("d-2", "host-1")
	p.Policy = ledger.Policy{MaxAttempts: 7}
	d2 := f.enqueue(p, t0)
	require.Equal(t, 7, d2.Policy.MaxAttempts)
	require.Equal(t, d.Policy.AckWindow, d2.Policy.AckWindow)
	require.Equal(t, d.Policy.BackoffBase, d2.Policy.BackoffBase)
}

func enqueueSameContentIsRepeated(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Ceremony = "cer-1"
	before := f.enqueue(r, t0)
	f.notApplied(before, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(time.Second)))

	// AvailableAt is not content: a later offer time is still a repeat, and
	// it does not move the stored one.
	r.AvailableAt = at(time.Hour)
	f.notApplied(before, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(2*time.Second)))
}

func enqueueRepeatedAfterTheRecordMovedOn(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	f.enqueue(r, t0)
	f.leaseOne("d-1", ownerA, t0)
	f.notApplied(f.get("d-1"), ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(time.Second)))

	_, err := f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(2*time.Second))
	require.NoError(t, err)
	ended := f.requireState("d-1", ledger.DeliveryStateExpired)
	f.notApplied(ended, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(3*time.Second)))
}

// enqueueRepeatedAfterAFollowSupersession: a Follow supersession moves a
// delivery to the replacement target; the producer's original request is
// still the same content (Repeated), as is one already sent to the
// replacement, while a third target is Conflict. A move back to the
// original target forgets where it came from.
func enqueueRepeatedAfterAFollowSupersession(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-old")
	f.enqueue(r, t0)
	require.Empty(t, f.get("d-1").EnqueuedTarget, "not moved yet")
	_, err := f.l.Supersede(f.ctx, "host-old", "host-new", ledger.Follow, at(time.Second))
	require.NoError(t, err)
	moved := f.get("d-1")
	require.Equal(t, ledger.Target("host-new"), moved.Target)
	require.Equal(t, ledger.Target("host-old"), moved.EnqueuedTarget)
	f.notApplied(moved, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(2*time.Second)))
	f.notApplied(moved, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, req("d-1", "host-new"), at(2*time.Second)))
	f.notApplied(moved, ledger.OutcomeConflict)(f.l.Enqueue(f.ctx, req("d-1", "host-third"), at(2*time.Second)))

	// Moved on again, it still remembers the first target.
	_, err = f.l.Supersede(f.ctx, "host-new", "host-third", ledger.Follow, at(3*time.Second))
	require.NoError(t, err)
	again := f.get("d-1")
	require.Equal(t, ledger.Target("host-old"), again.EnqueuedTarget)
	f.notApplied(again, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(4*time.Second)))

	// Moved back, Target is the enqueued one again.
	_, err = f.l.Supersede(f.ctx, "host-third", "host-old", ledger.Follow, at(5*time.Second))
	require.NoError(t, err)
	back := f.get("d-1")
	require.Equal(t, ledger.Target("host-old"), back.Target)
	require.Empty(t, back.EnqueuedTarget)
	f.notApplied(back, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(6*time.Second)))
}

func enqueueDifferentContentIsConflict(t *testing.T, f *ledgerFixture) {
	base := req("d-1", "host-1")
	base.Ceremony = "cer-1"
	before := f.enqueue(base, t0)

	longer := testPolicy()
	longer.AckWindow += time.Minute
	for name, change := range map[string]func(*ledger.EnqueueRequest){
		"target":        func(r *ledger.EnqueueRequest) { r.Target = "host-2" },
		"ceremony":      func(r *ledger.EnqueueRequest) { r.Ceremony = "cer-2" },
		"no ceremony":   func(r *ledger.EnqueueRequest) { r.Ceremony = "" },
		"payload":       func(r *ledger.EnqueueRequest) { r.Payload = []byte("something else") },
		"empty payload": func(r *ledger.EnqueueRequest) { r.Payload = nil },
		"max attempts":  func(r *ledger.EnqueueRequest) { r.Policy.MaxAttempts++ },
		"backoff base":  func(r *ledger.EnqueueRequest) { r.Policy.BackoffBase += time.Second },
		"backoff max":   func(r *ledger.EnqueueRequest) { r.Policy.BackoffMax += time.Second },
		"ack window":    func(r *ledger.EnqueueRequest) { r.Policy = longer },
	} {
		r := base
		change(&r)
		res, err := f.l.Enqueue(f.ctx, r, at(time.Second))
		require.NoError(t, err, name)
		require.Equal(t, ledger.OutcomeConflict, res.Outcome, "changing the %s must conflict", name)
		require.False(t, res.Applied(), name)
		require.Equal(t, before, res.Delivery, "a conflict carries the stored record (%s)", name)
		f.requireUnchanged(before)
	}
}

func enqueueNilAndEmptyPayload(t *testing.T, f *ledgerFixture) {
	r := req("d-nil", "host-1")
	r.Payload = nil
	dn := f.enqueue(r, t0)
	require.Nil(t, dn.Payload)
	r.Payload = []byte{}
	f.notApplied(dn, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, r, at(time.Second)))

	e := req("d-empty", "host-1")
	e.Payload = []byte{}
	de := f.enqueue(e, t0)
	require.Nil(t, de.Payload, "an empty payload reads back as nil")
	require.Nil(t, f.get("d-empty").Payload, "an empty payload reads back as nil")
	e.Payload = nil
	f.notApplied(de, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, e, at(time.Second)))
}

func enqueuePayloadRoundTripsAnyBytes(t *testing.T, f *ledgerFixture) {
	payload := make([]byte, 0, 512)
	for i := range 256 {
		payload = append(payload, byte(i))
	}
	payload = append(payload, 0, 0, 0xff, 0xfe, 0, 'x', 0) // NUL runs and invalid UTF-8
	r := req("d-1", "host-1")
	r.Payload = payload
	d := f.enqueue(r, t0)
	require.Equal(t, payload, d.Payload)
	require.Equal(t, payload, f.get("d-1").Payload)

	single := req("d-nul", "host-1")
	single.Payload = []byte{0}
	f.enqueue(single, t0)
	require.Equal(t, []byte{0}, f.get("d-nul").Payload, "a lone NUL byte is not an empty payload")
}

func enqueuePayloadAtTheLimit(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Payload = bytes.Repeat([]byte{0xA5}, ledger.DefaultMaxPayload)
	f.enqueue(r, t0)
	require.Equal(t, r.Payload, f.get("d-1").Payload)
}

func enqueuePayloadIsCopied(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Payload = []byte("original")
	res, err := f.l.Enqueue(f.ctx, r, t0)
	require.NoError(t, err)
	r.Payload[0] = 'X'
	res.Delivery.Payload[1] = 'X'
	got := f.get("d-1")
	require.Equal(t, []byte("original"), got.Payload, "the store must not share the caller's payload memory")
	got.Payload[2] = 'X'
	require.Equal(t, []byte("original"), f.get("d-1").Payload, "Get must return a copy")
}

func enqueueTimesAreNormalised(t *testing.T, f *ledgerFixture) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	now := time.Date(2030, time.January, 1, 5, 30, 0, 123_456_789, zone)
	avail := time.Date(2030, time.January, 1, 6, 30, 0, 999_999_999, zone)
	r := req("d-1", "host-1")
	r.AvailableAt = avail
	d := f.enqueue(r, now)

	wantNow := time.Date(2030, time.January, 1, 0, 0, 0, 123_456_000, time.UTC)
	wantAvail := time.Date(2030, time.January, 1, 1, 0, 0, 999_999_000, time.UTC)
	for _, got := range []ledger.Delivery{d, f.get("d-1")} {
		require.Equal(t, wantNow, got.CreatedAt)
		require.Equal(t, wantNow, got.UpdatedAt)
		require.Equal(t, wantAvail, got.AvailableAt)
		require.Equal(t, time.UTC, got.CreatedAt.Location())
		require.Equal(t, time.UTC, got.AvailableAt.Location())
	}

	// A lease duration with nanoseconds is truncated too, so the lease ends
	// on a microsecond.
	lres := f.lease(ledger.LeaseFilter{}, ownerA, avail, time.Second+999, 1)
	require.Len(t, lres.Leased, 1)
	require.Equal(t, wantAvail, lres.Leased[0].Lease.GrantedAt)
	require.Equal(t, wantAvail.Add(time.Second), lres.Leased[0].Lease.ExpiresAt)
}

func enqueueBatchOutcomePerItem(t *testing.T, f *ledgerFixture) {
	b := f.batcher()
	same := f.enqueue(req("d-same", "host-1"), t0)
	other := f.enqueue(req("d-other", "host-1"), t0)

	conflicting := req("d-other", "host-2")
	results, err := b.EnqueueBatch(f.ctx, []ledger.EnqueueRequest{
		req("d-new-1", "host-1"),
		req("d-same", "host-1"),
		conflicting,
		req("d-new-2", "host-2"),
	}, at(time.Second))
	require.NoError(t, err)
	require.Len(t, results, 4)
	want := []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeRepeated, ledger.OutcomeConflict, ledger.OutcomeApplied}
	for i, res := range results {
		require.Equal(t, want[i], res.Outcome, "item %d", i)
		require.Equal(t, res.Outcome == ledger.OutcomeApplied, res.Applied(), "item %d", i)
		require.Equal(t, f.get(res.Delivery.ID), res.Delivery, "item %d carries the record as it now stands", i)
	}
	require.Equal(t, ledger.DeliveryID("d-new-1"), results[0].Delivery.ID)
	require.Equal(t, at(time.Second), results[0].Delivery.CreatedAt)
	require.Equal(t, ledger.DeliveryStateOffered, results[3].Delivery.State)
	f.requireUnchanged(same)
	f.requireUnchanged(other)
}

func enqueueBatchDuplicateIDs(t *testing.T, f *ledgerFixture) {
	b := f.batcher()
	results, err := b.EnqueueBatch(f.ctx, []ledger.EnqueueRequest{
		req("d-1", "host-1"),
		req("d-1", "host-1"), // same as the earlier item: a repeat
		req("d-1", "host-2"), // differs from the earlier item: a conflict
	}, t0)
	require.NoError(t, err)
	require.Len(t, results, 3)
	require.Equal(t, ledger.OutcomeApplied, results[0].Outcome)
	require.Equal(t, ledger.OutcomeRepeated, results[1].Outcome)
	require.Equal(t, ledger.OutcomeConflict, results[2].Outcome)
	stored := f.get("d-1")
	require.Equal(t, ledger.Target("host-1"), stored.Target)
	for i, res := range results {
		require.Equal(t, stored, res.Delivery, "item %d", i)
	}
	require.Len(t, f.all(), 1)
}

func enqueueBatchOneInvalidItemWritesNothing(t *testing.T, f *ledgerFixture) {
	b := f.batcher()
	existing := f.enqueue(req("d-0", "host-1"), t0)
	bad := req("d-2", "")
	_, err := b.EnqueueBatch(f.ctx, []ledger.EnqueueRequest{req("d-1", "host-1"), bad, req("d-3", "host-1")}, at(time.Second))
	requireInvalid(t, err)
	f.requireAbsent("d-1")
	f.requireAbsent("d-3")
	require.Equal(t, []ledger.Delivery{existing}, f.all())

	// The last item is checked as well as the first.
	big := req("d-4", "host-1")
	big.Payload = make([]byte, ledger.DefaultMaxPayload+1)
	_, err = b.EnqueueBatch(f.ctx, []ledger.EnqueueRequest{req("d-1", "host-1"), big}, at(time.Second))
	requireInvalid(t, err)
	require.Equal(t, []ledger.Delivery{existing}, f.all())
}

func enqueueAvailableAtLongAgo(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.AvailableAt = time.Date(1901, time.January, 1, 0, 0, 0, 0, time.UTC)
	f.enqueue(r, t0)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, f.leaseIDs(ledger.LeaseFilter{}, ownerA, t0, 10),
		"an AvailableAt in the past, however far, means offerable now")
}
