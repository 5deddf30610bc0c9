package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// Tests of group commit (group.go). Most of them fix a group's members
// and their order: the store's queues get a window of a minute and a
// maximum of exactly the calls of the test, and each call starts only
// once the one before it is queued, so the group is taken when the last
// arrives, with the calls in that order. Their answers are compared with
// those of the same calls, in the same order, on a store without group
// commit.

var groupT0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// groupTestStore returns a migrated store in a fresh schema, stamped with
// a fixed clock, quiet about the skew of that clock.
func groupTestStore(t *testing.T, opts ...Option) (*Store, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := pgtest.Pool(t)
	s, err := New(pool, append([]Option{WithSchema(pgtest.Schema(t, pool)), WithClock(func() time.Time { return groupT0 }),
		WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	return s, ctx
}

// fixGroups makes the next group of each queue take exactly n calls,
// however the callers' arrivals interleave.
func fixGroups(s *Store, n int) {
	s.groups.deliveries.window, s.groups.deliveries.max = time.Minute, n
	s.groups.entries.window, s.groups.entries.max = time.Minute, n
	s.groups.deliveries.waitAlone, s.groups.entries.waitAlone = true, true
}

// queued waits until q holds n requests waiting for a group.
func queued[Req, Res any](t *testing.T, q *groupQueue[Req, Res], n int) {
	t.Helper()
	queuedOr(t, q, n, func() bool { return false })
}

// queuedOr is queued that fails as soon as gone reports that the call
// expected to queue returned instead.
func queuedOr[Req, Res any](t *testing.T, q *groupQueue[Req, Res], n int, gone func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		q.mu.Lock()
		k := len(q.pending)
		q.mu.Unlock()
		switch {
		case k >= n:
			return
		case gone():
			t.Fatalf("call %d returned before it was queued", n)
		case time.Now().After(deadline):
			t.Fatalf("%d calls queued, want %d", k, n)
		}
		runtime.Gosched()
	}
}

// answer is what one call returned.
type answer[R any] struct {
	res R
	err error
}

// inOrder runs calls, each from a goroutine of its own started once the
// ones before it are queued in q, and returns their answers.
func inOrder[Req, Res, R any](t *testing.T, q *groupQueue[Req, Res], calls []func() (R, error)) []answer[R] {
	t.Helper()
	out := make([]answer[R], len(calls))
	var wg sync.WaitGroup
	var last atomic.Bool
	for i, call := range calls {
		last.Store(false)
		wg.Go(func() {
			out[i].res, out[i].err = call()
			if i < len(calls)-1 {
				last.Store(true)
			}
		})
		if i < len(calls)-1 {
			queuedOr(t, q, i+1, last.Load)
		}
	}
	wg.Wait()
	return out
}

// alone runs calls one after the other.
func alone[R any](calls []func() (R, error)) []answer[R] {
	out := make([]answer[R], len(calls))
	for i, call := range calls {
		out[i].res, out[i].err = call()
	}
	return out
}

// blank removes what differs between two stores given the same calls:
// the random tokens.
func blank(d ledger.Delivery) ledger.Delivery {
	d = d.Clone()
	if d.Lease != nil {
		d.Lease.Token = ""
	}
	if d.EndedLease != nil {
		d.EndedLease.Token = ""
	}
	return d
}

func blankEntry(e ledger.OutboxEntry) ledger.OutboxEntry {
	e = e.Clone()
	if e.Claim != nil {
		e.Claim.Token = ""
	}
	if e.EndedClaim != nil {
		e.EndedClaim.Token = ""
	}
	return e
}

func TestGroupCommitOptions(t *testing.T) {
	for _, opt := range []Option{WithGroupCommitWindow(-time.Nanosecond), WithGroupCommitWindow(MaxGroupCommitWindow + 1),
		WithGroupCommitMax(0), WithGroupCommitMax(ledger.MaxLimit + 1)} {
		_, err := New(nil, opt)
		require.ErrorIs(t, err, ledger.ErrInvalid)
		var ie *ledger.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Contains(t, ie.Field, "group commit")
	}
	s, err := New(&pgxpool.Pool{}, WithGroupCommitWindow(0), WithGroupCommitMax(1))
	require.NoError(t, err)
	require.NotNil(t, s.groups, "on by default")
	assert.Equal(t, time.Duration(0), s.groups.deliveries.window)
	assert.Equal(t, 1, s.groups.entries.max)
	s, err = New(&pgxpool.Pool{}, WithGroupCommit(false))
	require.NoError(t, err)
	require.Nil(t, s.groups)
}

// TestBulkColumnsKnown checks that the bulk write-back knows every column
// of both tables: its SQL type, its array and its comparison.
func TestBulkColumnsKnown(t *testing.T) {
	for _, cols := range [][]column{(&deliveryRow{}).columns(), (&outboxRow{}).columns()} {
		require.LessOrEqual(t, len(cols), 64, "a column set is a 64-bit mask")
		for _, c := range cols {
			require.NotEmpty(t, sqlType(c.ptr), c.name)
			_, unknown := newColumnArray(c.ptr, 1).(*unknownArray)
			require.False(t, unknown, c.name)
			require.True(t, sameValue(c.ptr, c.ptr), c.name)
		}
	}
}

// TestGroupCommitManyCallers completes 64 leased deliveries from 64
// goroutines in one group, then marks them processed in another.
func TestGroupCommitManyCallers(t *testing.T) {
	const n = 64
	s, ctx := groupTestStore(t)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	reqs := make([]ledger.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%02d", i)), Target: ledger.Target(fmt.Sprintf("h%d", i%4))}
	}
	_, err := s.EnqueueBatch(ctx, reqs, groupT0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, groupT0, time.Hour, n)
	require.NoError(t, err)
	require.Len(t, lr.Leased, n)
	fixGroups(s, n)

	all := func(call func(l ledger.Lease) (ledger.DeliveryResult, error)) {
		var wg sync.WaitGroup
		res := make([]ledger.DeliveryResult, n)
		errs := make([]error, n)
		for i, ld := range lr.Leased {
			wg.Go(func() { res[i], errs[i] = call(ld.Lease) })
		}
		wg.Wait()
		for i := range res {
			require.NoError(t, errs[i])
			require.Equal(t, ledger.OutcomeApplied, res[i].Outcome)
			require.Equal(t, lr.Leased[i].Delivery.ID, res[i].Delivery.ID)
		}
	}
	at := groupT0.Add(time.Second)
	all(func(l ledger.Lease) (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, l, "seen", at) })
	all(func(l ledger.Lease) (ledger.DeliveryResult, error) {
		return s.MarkProcessed(ctx, l.DeliveryID, owner, nil, ledger.ActionRef("act-"+string(l.DeliveryID)), at)
	})
	q := s.groups.deliveries
	require.EqualValues(t, 2, q.groupsRun.Load())
	require.EqualValues(t, 2*n, q.callsGrouped.Load())

	for _, ld := range lr.Leased {
		d, err := s.Get(ctx, ld.Delivery.ID)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateProcessed, d.State)
		require.Equal(t, ld.Delivery.Version+2, d.Version)
		require.Equal(t, ledger.ActionRef("act-"+string(d.ID)), d.Processing.Action)
		h, err := s.History(ctx, d.ID)
		require.NoError(t, err)
		require.Len(t, h, 4)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue, ledger.OpLease, ledger.OpAcknowledge, ledger.OpMarkProcessed},
			[]ledger.Operation{h[0].Op, h[1].Op, h[2].Op, h[3].Op})
	}
	st, err := s.Stats(ctx, ledger.StatsFilter{}, at)
	require.NoError(t, err)
	require.EqualValues(t, n, st.ByState[ledger.DeliveryStateProcessed])
	require.EqualValues(t, 0, st.ByState[ledger.DeliveryStateAcknowledged])
}

// deliveryScenario prepares s and returns the calls of one mixed group.
func deliveryScenario(ctx context.Context, t *testing.T, s *Store) []func() (ledger.DeliveryResult, error) {
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	var reqs []ledger.EnqueueRequest
	for i, target := range []ledger.Target{"h1", "h1", "h1", "h1", "h2", "h3"} {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%d", i+1)), Target: target})
	}
	_, err := s.EnqueueBatch(ctx, reqs, groupT0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, groupT0, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 6)
	lease := map[ledger.DeliveryID]ledger.Lease{}
	for _, ld := range lr.Leased {
		lease[ld.Delivery.ID] = ld.Lease
	}
	stale := lease["d1"]
	t1 := groupT0.Add(2 * time.Minute) // every lease above has expired
	lr, err = s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"h1"}}, owner, t1, time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 4)
	for _, ld := range lr.Leased {
		lease[ld.Delivery.ID] = ld.Lease
	}
	lr, err = s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"h2", "h3"}}, owner, t1, time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 2)
	for _, ld := range lr.Leased {
		lease[ld.Delivery.ID] = ld.Lease
	}
	for _, id := range []ledger.DeliveryID{"d2", "d3", "d4"} {
		r, err := s.Acknowledge(ctx, lease[id], "seen", t1)
		require.NoError(t, err)
		require.True(t, r.Applied())
	}
	at := t1.Add(time.Second)
	fenced := func(id ledger.DeliveryID, f int64) func() (ledger.DeliveryResult, error) {
		return func() (ledger.DeliveryResult, error) {
			return s.MarkProcessed(ctx, id, owner, ledger.FenceOf(f), ledger.ActionRef("act-"+string(id)), at)
		}
	}
	return []func() (ledger.DeliveryResult, error){
		func() (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, lease["d1"], "first", at) },
		func() (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, lease["d1"], "again", at) },
		func() (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, stale, "stale", at) },
		fenced("d2", 5),
		fenced("d3", 3), // below d2's fence, accepted just before in the same group
		fenced("d4", 7),
		fenced("d5", 1), // not acknowledged; h2 has no fence row yet
		func() (ledger.DeliveryResult, error) {
			return s.MarkFailed(ctx, lease["d6"], ledger.FailureReason{Message: "refused"}, at)
		},
		func() (ledger.DeliveryResult, error) { return s.Release(ctx, lease["d1"], at) },
		func() (ledger.DeliveryResult, error) {
			missing := lease["d6"]
			missing.DeliveryID = "nope"
			return s.Acknowledge(ctx, missing, "", at)
		},
		func() (ledger.DeliveryResult, error) { return s.MarkProcessed(ctx, "d1", owner, nil, "act-d1", at) },
		func() (ledger.DeliveryResult, error) {
			return s.RecordActivation(ctx, "d6", ledger.Activation{Result: ledger.ActivationDelivered}, at)
		},
		func() (ledger.DeliveryResult, error) { return s.Abandon(ctx, "d5", ledger.Cause{Kind: "dropped"}, at) },
	}
}

// TestGroupCommitMixedGroupAnswersAsAlone runs one group of calls that
// meet each other (two on one record, a stale token, fences of one target
// accepted and rejected, a call on a record that does not exist) and
// compares every answer and everything written with the same calls made
// one at a time without group commit.
func TestGroupCommitMixedGroupAnswersAsAlone(t *testing.T) {
	grouped, gctx := groupTestStore(t)
	single, sctx := groupTestStore(t, WithGroupCommit(false))
	gcalls := deliveryScenario(gctx, t, grouped)
	scalls := deliveryScenario(sctx, t, single)
	fixGroups(grouped, len(gcalls))
	got := inOrder(t, grouped.groups.deliveries, gcalls)
	want := alone(scalls)
	require.EqualValues(t, 1, grouped.groups.deliveries.groupsRun.Load(), "one group")

	outcomes := make([]ledger.Outcome, len(got))
	for i := range got {
		require.NoError(t, got[i].err, "call %d", i)
		require.NoError(t, want[i].err, "call %d", i)
		assert.Equal(t, want[i].res.Outcome, got[i].res.Outcome, "call %d", i)
		assert.Equal(t, blank(want[i].res.Delivery), blank(got[i].res.Delivery), "call %d", i)
		outcomes[i] = got[i].res.Outcome
	}
	// The scenario covers what it says it does.
	require.Equal(t, []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeRepeated, ledger.OutcomeLeaseLost,
		ledger.OutcomeApplied, ledger.OutcomeFenceRejected, ledger.OutcomeApplied, ledger.OutcomeWrongState,
		ledger.OutcomeApplied, ledger.OutcomeWrongState, ledger.OutcomeNotFound, ledger.OutcomeApplied,
		ledger.OutcomeApplied, ledger.OutcomeApplied}, outcomes)

	for i := 1; i <= 6; i++ {
		id := ledger.DeliveryID(fmt.Sprintf("d%d", i))
		g, err := grouped.Get(gctx, id)
		require.NoError(t, err)
		w, err := single.Get(sctx, id)
		require.NoError(t, err)
		assert.Equal(t, blank(w), blank(g), string(id))
		gh, err := grouped.History(gctx, id)
		require.NoError(t, err)
		wh, err := single.History(sctx, id)
		require.NoError(t, err)
		assert.Equal(t, wh, gh, string(id))
	}
	assert.Equal(t, fenceRows(sctx, t, single), fenceRows(gctx, t, grouped))
	assert.Equal(t, map[string]*int64{"h1": ptr(int64(7))}, fenceRows(gctx, t, grouped), "no fence row for h2")
	at := groupT0.Add(time.Hour)
	gs, err := grouped.Stats(gctx, ledger.StatsFilter{}, at)
	require.NoError(t, err)
	ws, err := single.Stats(sctx, ledger.StatsFilter{}, at)
	require.NoError(t, err)
	assert.Equal(t, ws, gs)
}

func fenceRows(ctx context.Context, t *testing.T, s *Store) map[string]*int64 {
	t.Helper()
	rows, err := s.db.Query(ctx, "SELECT target, highest FROM "+pgx.Identifier{s.cfg.schema, "target_fences"}.Sanitize())
	require.NoError(t, err)
	out := map[string]*int64{}
	var target string
	var highest *int64
	_, err = pgx.ForEachRow(rows, []any{&target, &highest}, func() error { out[target] = highest; return nil })
	require.NoError(t, err)
	return out
}

// claimScenario prepares o and returns the calls of one mixed group of
// claim completions.
func claimScenario(ctx context.Context, t *testing.T, o *Outbox) []func() (ledger.OutboxResult, error) {
	var envs []ledger.Envelope
	for i := range 4 {
		envs = append(envs, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("e%d", i)})
	}
	_, err := o.EnqueueBatch(ctx, envs)
	require.NoError(t, err)
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 4})
	require.NoError(t, err)
	require.Len(t, cs, 4)
	retry := groupT0.Add(time.Hour)
	fail := ledger.EmissionError{Code: "503", Message: "busy"}
	return []func() (ledger.OutboxResult, error){
		func() (ledger.OutboxResult, error) {
			return o.MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "r"})
		},
		func() (ledger.OutboxResult, error) {
			return o.MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "r"})
		},
		func() (ledger.OutboxResult, error) { return o.MarkClaimFailed(ctx, cs[1].Claim, fail, &retry) },
		func() (ledger.OutboxResult, error) { return o.ReleaseClaim(ctx, cs[1].Claim, "late") },
		func() (ledger.OutboxResult, error) { return o.MarkClaimDeadLettered(ctx, cs[2].Claim, fail, "poison") },
		func() (ledger.OutboxResult, error) { return o.ReleaseClaim(ctx, cs[3].Claim, "shutdown") },
		func() (ledger.OutboxResult, error) {
			missing := cs[3].Claim
			missing.EntryID = "nope"
			return o.MarkClaimDelivered(ctx, missing, ledger.EmissionResult{})
		},
	}
}

func TestGroupCommitClaimsAnswerAsAlone(t *testing.T) {
	grouped, gctx := groupTestStore(t)
	single, sctx := groupTestStore(t, WithGroupCommit(false))
	gcalls := claimScenario(gctx, t, grouped.Outbox())
	scalls := claimScenario(sctx, t, single.Outbox())
	fixGroups(grouped, len(gcalls))
	got := inOrder(t, grouped.groups.entries, gcalls)
	want := alone(scalls)
	require.EqualValues(t, 1, grouped.groups.entries.groupsRun.Load(), "one group")
	applied := 0
	for i := range got {
		require.NoError(t, got[i].err, "call %d", i)
		require.NoError(t, want[i].err, "call %d", i)
		assert.Equal(t, want[i].res.Outcome, got[i].res.Outcome, "call %d", i)
		assert.Equal(t, blankEntry(want[i].res.Entry), blankEntry(got[i].res.Entry), "call %d", i)
		if got[i].res.Applied() {
			applied++
		}
	}
	require.Equal(t, 4, applied, "one completion per entry applies")
	for i := range 4 {
		id := ledger.OutboxEntryIDFor(fmt.Sprintf("e%d", i))
		g, err := grouped.Outbox().FindByID(gctx, id)
		require.NoError(t, err)
		w, err := single.Outbox().FindByID(sctx, id)
		require.NoError(t, err)
		assert.Equal(t, blankEntry(w), blankEntry(g))
		gh, err := grouped.Outbox().EntryHistory(gctx, id)
		require.NoError(t, err)
		wh, err := single.Outbox().EntryHistory(sctx, id)
		require.NoError(t, err)
		assert.Equal(t, wh, gh)
	}
	gs, err := grouped.Outbox().OutboxStats(gctx, groupT0)
	require.NoError(t, err)
	ws, err := single.Outbox().OutboxStats(sctx, groupT0)
	require.NoError(t, err)
	assert.Equal(t, ws, gs)
}

// leasedDeliveries enqueues ids and leases them.
func leasedDeliveries(ctx context.Context, t *testing.T, s *Store, ids ...ledger.DeliveryID) map[ledger.DeliveryID]ledger.Lease {
	t.Helper()
	reqs := make([]ledger.EnqueueRequest, len(ids))
	for i, id := range ids {
		reqs[i] = ledger.EnqueueRequest{ID: id, Target: "host"}
	}
	_, err := s.EnqueueBatch(ctx, reqs, groupT0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "agent", Incarnation: "boot"}, groupT0, time.Hour, len(ids))
	require.NoError(t, err)
	require.Len(t, lr.Leased, len(ids))
	out := map[ledger.DeliveryID]ledger.Lease{}
	for _, ld := range lr.Leased {
		out[ld.Delivery.ID] = ld.Lease
	}
	return out
}

// TestGroupCommitOneFailingCallFailsNoOther makes the write of one
// delivery fail (a trigger refuses it): the group's transaction fails,
// and every call then runs on its own, so only that call fails.
func TestGroupCommitOneFailingCallFailsNoOther(t *testing.T) {
	s, ctx := groupTestStore(t)
	leases := leasedDeliveries(ctx, t, s, "good-1", "bad", "good-2")
	schema := pgx.Identifier{s.cfg.schema}.Sanitize()
	for _, sql := range []string{
		`CREATE FUNCTION ` + schema + `.refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.id = 'bad' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER refuse_bad BEFORE UPDATE ON ` + schema + `.deliveries FOR EACH ROW EXECUTE FUNCTION ` + schema + `.refuse_bad()`,
	} {
		_, err := s.db.Exec(ctx, sql)
		require.NoError(t, err)
	}
	fixGroups(s, 3)
	ack := func(id ledger.DeliveryID) func() (ledger.DeliveryResult, error) {
		return func() (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, leases[id], "seen", groupT0) }
	}
	got := inOrder(t, s.groups.deliveries, []func() (ledger.DeliveryResult, error){ack("good-1"), ack("bad"), ack("good-2")})
	require.EqualValues(t, 1, s.groups.deliveries.groupsRun.Load(), "the three were grouped")

	var pgErr *pgconn.PgError
	require.ErrorAs(t, got[1].err, &pgErr)
	require.Contains(t, pgErr.Message, "refused for the test")
	for _, i := range []int{0, 2} {
		require.NoError(t, got[i].err)
		require.Equal(t, ledger.OutcomeApplied, got[i].res.Outcome)
	}
	for id, want := range map[ledger.DeliveryID]ledger.DeliveryState{"good-1": ledger.DeliveryStateAcknowledged,
		"bad": ledger.DeliveryStateLeased, "good-2": ledger.DeliveryStateAcknowledged} {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, d.State, string(id))
	}
}

// TestGroupLoneCallerDoesNotWait: with nothing else in flight a leader
// has nobody to wait for, so even a window of a minute costs a caller
// whose calls come one at a time nothing. The deadline only turns a wait
// into a failure; no call takes near it. Every call runs alone.
func TestGroupLoneCallerDoesNotWait(t *testing.T) {
	const n = 5
	s, ctx := groupTestStore(t)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	reqs := make([]ledger.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%d", i)), Target: "h"}
	}
	_, err := s.EnqueueBatch(ctx, reqs, groupT0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, groupT0, time.Hour, n)
	require.NoError(t, err)
	require.Len(t, lr.Leased, n)
	s.groups.deliveries.window = time.Minute

	callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, ld := range lr.Leased {
		r, err := s.Acknowledge(callCtx, ld.Lease, "seen", groupT0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, r.Outcome)
		r, err = s.MarkProcessed(callCtx, ld.Delivery.ID, owner, nil, "done", groupT0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, r.Outcome)
	}
	require.Zero(t, s.groups.deliveries.groupsRun.Load())
	require.Zero(t, s.groups.deliveries.alone.Load(), "every call alone has ended")
}
