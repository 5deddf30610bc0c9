package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// Tests of the guards behind the row locks. A transition reads a record
// under its row lock, decides in Go and writes it back; the write is
// guarded twice more: the UPDATE names the version it read (a write-back
// of a row that changed under it writes nothing), and the caller checks
// that every row it meant to write was written. Each later guard only
// matters when the one before it fails, so these tests break the first
// on purpose: a writer the row lock cannot stop (one running in the
// call's own transaction, as a bug or an editor of the table would) bumps
// the record between the statements of the call, before each statement
// in turn. Whatever the moment, the outcome must be one of the two a
// correct store allows: the call failed and nothing of its transaction
// stands, or it applied and its effect and the writer's (when the
// writer's transaction committed) both stand. The tests do not depend on
// the text or the number of the statements, only on the tables' columns.

// interjector is a pgx tracer that runs write on the connection of the
// k-th statement (or batch) sent inside a transaction, in that
// transaction, just before the statement. It fires once per arming.
type interjector struct {
	mu    sync.Mutex
	armed bool
	busy  bool // write is running: its own statements do not count
	k, n  int
	write func(ctx context.Context, conn *pgx.Conn) (xid string, err error)
	fired bool
	xid   string // the transaction write ran in
	err   error
}

func (in *interjector) arm(k int, write func(ctx context.Context, conn *pgx.Conn) (string, error)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.armed, in.busy, in.k, in.n, in.write = true, false, k, 0, write
	in.fired, in.xid, in.err = false, "", nil
}

func (in *interjector) result() (fired bool, xid string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.armed = false
	return in.fired, in.xid, in.err
}

func (in *interjector) statement(ctx context.Context, conn *pgx.Conn) {
	in.mu.Lock()
	if !in.armed || in.busy || conn.PgConn().TxStatus() != 'T' {
		in.mu.Unlock()
		return
	}
	if in.n++; in.n != in.k {
		in.mu.Unlock()
		return
	}
	in.busy = true
	write := in.write
	in.mu.Unlock()
	xid, err := write(ctx, conn)
	in.mu.Lock()
	in.busy, in.armed, in.fired, in.xid, in.err = false, false, true, xid, err
	in.mu.Unlock()
}

func (in *interjector) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	in.statement(ctx, conn)
	return ctx
}

func (in *interjector) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (in *interjector) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	in.statement(ctx, conn)
	return ctx
}

func (in *interjector) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (in *interjector) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// interjectedStore returns a migrated store whose pool runs in's tracer,
// and a second store on the same pool and schema that makes the grants
// the tests' calls are made under: a store keeps the records it granted
// (held.go) and completes calls on them without the locking read, so the
// store under test must hold none for its calls to take the path whose
// guards these tests break.
func interjectedStore(t *testing.T, in *interjector, opts ...Option) (*Store, *Store, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.Tracer = in
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, append([]Option{WithSchema(pgtest.Schema(t, pool)), WithClock(func() time.Time { return groupT0 }),
		WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	grantor, err := New(pool, WithSchema(s.cfg.schema), WithClock(func() time.Time { return groupT0 }),
		WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	return s, grantor, ctx
}

// bump returns a writer that adds one to column of the row id of table,
// and to its version, as any writer must, and reports its transaction.
func bump(s *Store, table, column, id string) func(ctx context.Context, conn *pgx.Conn) (string, error) {
	sql := "UPDATE " + pgx.Identifier{s.cfg.schema, table}.Sanitize() + " SET " + column + " = " + column + " + 1, version = version + 1" +
		" WHERE id = $1 RETURNING pg_catalog.pg_current_xact_id()::text"
	return func(ctx context.Context, conn *pgx.Conn) (string, error) {
		var xid string
		err := conn.QueryRow(ctx, sql, id).Scan(&xid)
		return xid, err
	}
}

// committed reports whether the transaction xid committed.
func committed(ctx context.Context, t *testing.T, s *Store, xid string) bool {
	t.Helper()
	var status string
	require.NoError(t, s.db.QueryRow(ctx, "SELECT pg_catalog.pg_xact_status($1::xid8)", xid).Scan(&status))
	return status == "committed"
}

// TestVersionGuardHoldsWhenTheRowLockDoesNot: on the single-call path
// (group commit off), a write that slips in under the row lock between
// the read and the write-back must make the call fail rather than be
// overwritten. Without the version condition in the UPDATE, the call's
// write-back lands on the changed row and the writer's change is lost
// though its transaction committed.
func TestVersionGuardHoldsWhenTheRowLockDoesNot(t *testing.T) {
	t.Run("Delivery", func(t *testing.T) {
		in := &interjector{}
		s, grantor, ctx := interjectedStore(t, in, WithGroupCommit(false))
		for k := 1; ; k++ {
			require.Less(t, k, 20, "the call never ran out of statements")
			id := ledger.DeliveryID("d-" + string(rune('a'+k)))
			lease := leasedDeliveries(ctx, t, grantor, id)[id]
			before, err := s.Get(ctx, id)
			require.NoError(t, err)

			in.arm(k, bump(s, "deliveries", "activations", string(id)))
			res, err := s.Acknowledge(ctx, lease, "seen", groupT0)
			fired, xid, werr := in.result()
			require.NoError(t, werr, "the writer itself")
			after, gerr := s.Get(ctx, id)
			require.NoError(t, gerr)
			if !fired {
				require.NoError(t, err)
				require.Equal(t, ledger.OutcomeApplied, res.Outcome)
				require.Greater(t, k, 1, "no statement ran in a transaction")
				return
			}
			writerStands := committed(ctx, t, s, xid)
			if err == nil && res.Applied() {
				require.Equal(t, ledger.DeliveryStateAcknowledged, after.State, "statement %d: an applied call's effect stands", k)
			}
			if writerStands {
				require.Equal(t, before.Activations+1, after.Activations,
					"statement %d: the writer's transaction committed, so its change must stand, not be overwritten", k)
			} else {
				require.Error(t, err, "statement %d: the call's transaction rolled back, so the call must fail", k)
				require.Equal(t, before, after, "statement %d: nothing of a failed call stands", k)
			}
		}
	})

	t.Run("OutboxEntry", func(t *testing.T) {
		in := &interjector{}
		s, grantor, ctx := interjectedStore(t, in, WithGroupCommit(false))
		o := s.Outbox()
		for k := 1; ; k++ {
			require.Less(t, k, 20, "the call never ran out of statements")
			key := "e-" + string(rune('a'+k))
			er, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key})
			require.NoError(t, err)
			cs, err := grantor.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 1})
			require.NoError(t, err)
			require.Len(t, cs, 1)
			before, err := o.FindByID(ctx, er.Entry.ID)
			require.NoError(t, err)

			in.arm(k, bump(s, "outbox_entries", "attempts", string(er.Entry.ID)))
			res, err := o.MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
			fired, xid, werr := in.result()
			require.NoError(t, werr, "the writer itself")
			after, ferr := o.FindByID(ctx, er.Entry.ID)
			require.NoError(t, ferr)
			if !fired {
				require.NoError(t, err)
				require.Equal(t, ledger.OutcomeApplied, res.Outcome)
				require.Greater(t, k, 1, "no statement ran in a transaction")
				return
			}
			if err == nil && res.Applied() {
				require.Equal(t, ledger.OutboxStatusDelivered, after.Status, "statement %d: an applied call's effect stands", k)
			}
			if committed(ctx, t, s, xid) {
				require.Equal(t, before.Attempts+1, after.Attempts,
					"statement %d: the writer's transaction committed, so its change must stand, not be overwritten", k)
			} else {
				require.Error(t, err, "statement %d: the call's transaction rolled back, so the call must fail", k)
				require.Equal(t, before, after, "statement %d: nothing of a failed call stands", k)
			}
		}
	})
}

// TestGroupRowCheckHoldsWhenTheRowLockDoesNot: a group transaction
// writes its records back in one statement guarded by the versions it
// read, and checks that every row was written. When a write slips in
// under the row locks, the guarded statement skips that row; the check
// must then fail the group (whose calls run again on their own) rather
// than let it commit and answer Applied for a call whose write never
// landed.
func TestGroupRowCheckHoldsWhenTheRowLockDoesNot(t *testing.T) {
	t.Run("Deliveries", func(t *testing.T) {
		in := &interjector{}
		s, grantor, ctx := interjectedStore(t, in)
		for k := 1; ; k++ {
			require.Less(t, k, 20, "the group never ran out of statements")
			a, b := ledger.DeliveryID("a-"+string(rune('a'+k))), ledger.DeliveryID("b-"+string(rune('a'+k)))
			leases := leasedDeliveries(ctx, t, grantor, a, b)
			before, err := s.Get(ctx, a)
			require.NoError(t, err)

			groupsBefore := s.groups.deliveries.groupsRun.Load()
			fixGroups(s, 2)
			in.arm(k, bump(s, "deliveries", "activations", string(a)))
			ack := func(id ledger.DeliveryID) func() (ledger.DeliveryResult, error) {
				return func() (ledger.DeliveryResult, error) { return s.Acknowledge(ctx, leases[id], "seen", groupT0) }
			}
			got := inOrder(t, s.groups.deliveries, []func() (ledger.DeliveryResult, error){ack(a), ack(b)})
			fired, xid, werr := in.result()
			require.NoError(t, werr, "the writer itself")
			require.Equal(t, groupsBefore+1, s.groups.deliveries.groupsRun.Load(), "the two calls were grouped")
			for i, id := range []ledger.DeliveryID{a, b} {
				d, err := s.Get(ctx, id)
				require.NoError(t, err)
				if got[i].err == nil && got[i].res.Applied() {
					require.Equal(t, ledger.DeliveryStateAcknowledged, d.State,
						"statement %d: %s answered Applied, so its acknowledgement must stand", k, id)
				}
			}
			if !fired {
				require.Greater(t, k, 1, "no statement ran in the group's transaction")
				return
			}
			after, err := s.Get(ctx, a)
			require.NoError(t, err)
			if committed(ctx, t, s, xid) {
				require.Equal(t, before.Activations+1, after.Activations, "statement %d: the writer's change stands", k)
			}
		}
	})

	t.Run("OutboxEntries", func(t *testing.T) {
		in := &interjector{}
		s, grantor, ctx := interjectedStore(t, in)
		o := s.Outbox()
		for k := 1; ; k++ {
			require.Less(t, k, 20, "the group never ran out of statements")
			var claims []ledger.Claim
			for _, p := range []string{"a-", "b-"} {
				er, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: p + string(rune('a'+k))})
				require.NoError(t, err)
				cs, err := grantor.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 1})
				require.NoError(t, err)
				require.Len(t, cs, 1)
				require.Equal(t, er.Entry.ID, cs[0].Entry.ID)
				claims = append(claims, cs[0].Claim)
			}
			before, err := o.FindByID(ctx, claims[0].EntryID)
			require.NoError(t, err)

			groupsBefore := s.groups.entries.groupsRun.Load()
			fixGroups(s, 2)
			in.arm(k, bump(s, "outbox_entries", "attempts", string(claims[0].EntryID)))
			deliver := func(c ledger.Claim) func() (ledger.OutboxResult, error) {
				return func() (ledger.OutboxResult, error) {
					return o.MarkClaimDelivered(ctx, c, ledger.EmissionResult{ProviderRef: "ref"})
				}
			}
			got := inOrder(t, s.groups.entries, []func() (ledger.OutboxResult, error){deliver(claims[0]), deliver(claims[1])})
			fired, xid, werr := in.result()
			require.NoError(t, werr, "the writer itself")
			require.Equal(t, groupsBefore+1, s.groups.entries.groupsRun.Load(), "the two calls were grouped")
			for i, c := range claims {
				e, err := o.FindByID(ctx, c.EntryID)
				require.NoError(t, err)
				if got[i].err == nil && got[i].res.Applied() {
					require.Equal(t, ledger.OutboxStatusDelivered, e.Status,
						"statement %d: %s answered Applied, so its delivery must stand", k, c.EntryID)
				}
			}
			if !fired {
				require.Greater(t, k, 1, "no statement ran in the group's transaction")
				return
			}
			after, err := o.FindByID(ctx, claims[0].EntryID)
			require.NoError(t, err)
			if committed(ctx, t, s, xid) {
				require.Equal(t, before.Attempts+1, after.Attempts, "statement %d: the writer's change stands", k)
			}
		}
	})
}
