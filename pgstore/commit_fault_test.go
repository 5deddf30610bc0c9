package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// Every completing call of both ledgers, on its own (no group), with its
// COMMIT lost in each of the ways of the group fault test: its answer
// must match its row. Applied, without an error, exactly when the row is
// what the call wrote; an error only when the row is as it was. (The
// group transactions are covered by TestGroupCommitConnectionLostAtCommit.)

// lostCommits are the faults of TestCompletingCallsWithALostCommit: how
// the COMMIT is lost, and whether the test knows that it landed.
var lostCommits = []struct {
	name   string
	mode   cutMode
	pooler bool
}{
	{"CutBeforeCommitArrives", cutRequest, false},
	{"CutAfterCommitLanded", cutReply, false},
	{"CutRightAfterCommitSent", cutAfter, false},
	{"PoolerErrorBeforeCommitArrives", cutRequest, true},
	{"PoolerErrorAfterCommitLanded", cutReply, true},
}

// deliveryCall is one completing call of the delivery ledger on a leased
// delivery; prepare, when set, runs first, unfaulted.
type deliveryCall struct {
	name    string
	prepare func(ctx context.Context, s *Store, l ledger.Lease) error
	call    func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error)
}

var deliveryCalls = []deliveryCall{
	{name: "Acknowledge", call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
		return s.Acknowledge(ctx, l, "seen", groupT0)
	}},
	{name: "AcknowledgeProcessed", call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
		_, res, err := s.AcknowledgeProcessed(ctx, l, "seen", nil, ledger.ActionRef("a-1"), groupT0)
		return res, err
	}},
	{name: "MarkProcessed",
		prepare: func(ctx context.Context, s *Store, l ledger.Lease) error {
			_, err := s.Acknowledge(ctx, l, "seen", groupT0)
			return err
		},
		call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
			return s.MarkProcessed(ctx, l.DeliveryID, l.Owner, nil, ledger.ActionRef("a-1"), groupT0)
		}},
	{name: "MarkFailed", call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
		return s.MarkFailed(ctx, l, ledger.FailureReason{Message: "refused", Permanent: true}, groupT0)
	}},
	{name: "Release", call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
		return s.Release(ctx, l, groupT0)
	}},
	{name: "Abandon", call: func(ctx context.Context, s *Store, l ledger.Lease) (ledger.DeliveryResult, error) {
		return s.Abandon(ctx, l.DeliveryID, ledger.Cause{Kind: ledger.CauseBindingRevoked, Detail: "test"}, groupT0)
	}},
}

// entryCall is one completing call of the outbox on a claimed entry.
type entryCall struct {
	name string
	call func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error)
}

var entryCalls = []entryCall{
	{"MarkClaimDelivered", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		return o.MarkClaimDelivered(ctx, ce.Claim, ledger.EmissionResult{})
	}},
	{"MarkClaimFailed", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		next := groupT0.Add(time.Minute)
		return o.MarkClaimFailed(ctx, ce.Claim, ledger.EmissionError{Code: "503", Message: "later"}, &next)
	}},
	{"MarkClaimDeadLettered", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		return o.MarkClaimDeadLettered(ctx, ce.Claim, ledger.EmissionError{Code: "550", Message: "never"}, "permanent")
	}},
	{"ReleaseClaim", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		return o.ReleaseClaim(ctx, ce.Claim, "shutting down")
	}},
	{"SaveClaim", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		e := ce.Entry
		e.Envelope.Metadata = ledger.Metadata{"step": "2"}
		return o.SaveClaim(ctx, ce.Claim, e)
	}},
	{"CompleteClaims", func(ctx context.Context, o *Outbox, ce ledger.ClaimedEntry) (ledger.OutboxResult, error) {
		res, err := o.CompleteClaims(ctx, []ledger.ClaimCompletion{{Claim: ce.Claim, Op: ledger.OpMarkDelivered}})
		if len(res) == 0 {
			return ledger.OutboxResult{}, err
		}
		return res[0], err
	}},
}

// TestCompletingCallsWithALostCommit runs every completing call of both
// ledgers on its own with its COMMIT lost in each way of lostCommits, on
// a held record (the store's own lease or claim: the held write) and on
// one it does not hold (the ordinary path).
func TestCompletingCallsWithALostCommit(t *testing.T) {
	for _, fault := range lostCommits {
		for _, held := range []bool{true, false} {
			path := "Ordinary"
			if held {
				path = "Held"
			}
			t.Run(fault.name+"/"+path, func(t *testing.T) {
				t.Parallel()
				runLostCommit(t, fault.mode, fault.pooler, held)
			})
		}
	}
}

// runLostCommit runs every completing call of both ledgers on its own,
// with its COMMIT lost as mode and pooler say, on held records or not,
// and checks each answer against its row.
func runLostCommit(t *testing.T, mode cutMode, pooler, held bool) {
	f := newFaultFixture(t)
	ctx, s := f.ctx, f.s
	s.groups = nil // every call on its own
	f.tracer.atCommit = f.cutAs(mode, pooler)
	// arm places the fault at the next COMMIT, of call.
	arm := func() {
		f.tracer.fired.Store(0)
		f.tracer.armed.Store(true)
	}
	disarm := func() {
		f.tracer.armed.Store(false)
		require.EqualValues(t, 1, f.tracer.fired.Load(), "the call's COMMIT was seen")
		require.NoError(t, f.tracer.err)
	}
	for i, c := range deliveryCalls {
		id := f.ids[i]
		l := f.leases[id]
		if c.prepare != nil {
			require.NoError(t, c.prepare(ctx, s, l), c.name)
		}
		if !held {
			s.held.deliveries.cache.drop(string(id))
		}
		before, err := s.Get(ctx, id)
		require.NoError(t, err)
		arm()
		res, err := c.call(ctx, s, l)
		disarm()
		after, gerr := s.Get(ctx, id)
		require.NoError(t, gerr)
		checkAnswer(t, c.name, before.Version, after.Version, after, res.Outcome, res.Delivery, err)
	}
	o := s.Outbox()
	for i, c := range entryCalls {
		_, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", Payload: []byte("x"), IdempotencyKey: fmt.Sprintf("k-%d", i)})
		require.NoError(t, err)
		claimed, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 1})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		ce := claimed[0]
		if !held {
			s.held.entries.cache.drop(string(ce.Entry.ID))
		}
		arm()
		res, err := c.call(ctx, o, ce)
		disarm()
		after, gerr := o.FindByID(ctx, ce.Entry.ID)
		require.NoError(t, gerr)
		checkAnswer(t, c.name, ce.Entry.Version, after.Version, after, res.Outcome, res.Entry, err)
	}
}

// TestAHeldWriteKnowsItsOwnRow: were an error at COMMIT taken for
// "nothing committed" wrongly (here the pooler's 08P01, as the store
// once did), the held write's call, left to the ordinary path, finds the
// row exactly as the write made it and answers Applied: on its own and
// in a group. Not parallel: it changes refusedCodes for its duration.
func TestAHeldWriteKnowsItsOwnRow(t *testing.T) {
	refusedCodes["08P01"] = true
	t.Cleanup(func() { delete(refusedCodes, "08P01") })
	t.Run("Alone", func(t *testing.T) { runLostCommit(t, cutReply, true, true) })
	t.Run("Group", func(t *testing.T) {
		runCommitFault(t, commitFault{
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cutAs(cutReply, true) },
			landed:   true,
			unknown:  true,
		}, true)
	})
}

// checkAnswer checks a call's answer against its record as it stands:
// Applied without an error when the record moved on by the call (and the
// answer is the record), an error only when the record is unchanged.
func checkAnswer[R any](t *testing.T, name string, before, version int64, row R, outcome ledger.Outcome, answered R, err error) {
	t.Helper()
	if err != nil {
		require.Equal(t, before, version, "%s answered an error, but its write is there: %v", name, err)
		return
	}
	require.Equal(t, ledger.OutcomeApplied, outcome, "%s: answered without an error", name)
	require.Greater(t, version, before, "%s answered Applied, but its write is missing", name)
	require.Equal(t, row, answered, "%s: the answer is the record as it stands", name)
}
