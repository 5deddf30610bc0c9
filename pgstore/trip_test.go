package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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

// These tests pin what the one-trip transactions (trip.go) rely on, and
// count the round trips the hot calls cost.

// tripConn counts the requests a connection sends that the server
// answers with ReadyForQuery: a Sync (the end of a pipeline, or of the
// driver's preparing of new statements) or a simple Query (a COPY among
// them). The client waits for each, so each is a round trip.
type tripConn struct {
	net.Conn
	trips *atomic.Int64
}

func (c *tripConn) Write(p []byte) (int, error) {
	// The driver writes whole messages; the startup message, which has
	// no type byte, is never counted (the count starts after it).
	for q := p; len(q) >= 5; {
		size := 1 + int(binary.BigEndian.Uint32(q[1:5]))
		if size < 5 || size > len(q) {
			break
		}
		if q[0] == 'S' || q[0] == 'Q' {
			c.trips.Add(1)
		}
		q = q[size:]
	}
	return c.Conn.Write(p)
}

// tripStore returns a migrated store on a pool of one connection whose
// round trips trips counts, with a fixed clock.
func tripStore(t *testing.T, opts ...Option) (s *Store, trips *atomic.Int64, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // one connection, so that its statements are prepared once warmed up
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	trips = &atomic.Int64{}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tripConn{Conn: conn, trips: trips}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err = New(pool, append([]Option{WithSchema(pgtest.Schema(t, pool)), WithClock(func() time.Time { return groupT0 }),
		WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	return s, trips, ctx
}

// tripsOf returns how many round trips call cost, having run it once
// before so that the connection has prepared its statements.
func tripsOf(t *testing.T, trips *atomic.Int64, call func()) int64 {
	t.Helper()
	call()
	before := trips.Load()
	call()
	return trips.Load() - before
}

// TestOneTripIsOneImplicitTransaction pins what oneTrip relies on: a
// pipeline without BEGIN, ending in one Sync, is one round trip and one
// implicit transaction: set_config(..., true) holds for the statements
// after it and ends with it; a statement that fails undoes those before
// it; without a failure all of it commits.
func TestOneTripIsOneImplicitTransaction(t *testing.T) {
	s, trips, ctx := tripStore(t)
	fences := pgx.Identifier{s.cfg.schema, "target_fences"}.Sanitize()
	settings := "SELECT pg_catalog.current_setting('enable_seqscan') || pg_catalog.current_setting('enable_bitmapscan')"
	var got string
	read := func(rows pgx.Rows) error { return rows.Scan(&got) }

	n := tripsOf(t, trips, func() {
		committing, err := s.oneTrip(ctx, []tripStatement{{sql: grantPrelude}, {sql: settings, scan: read}})
		require.NoError(t, err)
		require.False(t, committing)
		require.Equal(t, "offoff", got, "the prelude's settings hold for the statement after it")
	})
	require.EqualValues(t, 1, n, "prelude and statement in one round trip")
	require.NoError(t, s.pool.QueryRow(ctx, settings).Scan(&got))
	require.Equal(t, "onon", got, "the settings ended with the transaction (the pool has one connection)")

	count := func() (n int) {
		t.Helper()
		require.NoError(t, s.pool.QueryRow(ctx, "SELECT count(*) FROM "+fences).Scan(&n))
		return n
	}
	trip := func(divisor int) []tripStatement {
		return []tripStatement{{sql: "INSERT INTO " + fences + " (target) VALUES ('t')"},
			{sql: "SELECT 1 / $1::int", args: []any{divisor}, scan: func(pgx.Rows) error { return nil }}}
	}
	committing, err := s.oneTrip(ctx, trip(0))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22012", pgErr.Code)
	require.False(t, committing, "a statement that failed: nothing committed, and the store knows it")
	require.Zero(t, count(), "the failure undid the insert before it")
	require.Equal(t, byte('I'), txStatus(ctx, t, s), "and no transaction is left open")

	committing, err = s.oneTrip(ctx, trip(1))
	require.NoError(t, err)
	require.False(t, committing)
	require.Equal(t, 1, count(), "without a failure the pipeline committed")
	require.Equal(t, byte('I'), txStatus(ctx, t, s))
}

// txStatus returns the transaction status of the pool's connection.
func txStatus(ctx context.Context, t *testing.T, s *Store) byte {
	t.Helper()
	pc, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer pc.Release()
	return pc.Conn().PgConn().TxStatus()
}

// TestOneTripClaimThatFailsCommitsNothing: a claim whose statement fails
// in the server (here a trigger refuses the claimed rows)
// answers that error, not an unknown outcome, and no entry is claimed.
func TestOneTripClaimThatFailsCommitsNothing(t *testing.T) {
	s, _, ctx := tripStore(t)
	o := s.Outbox()
	_, err := o.EnqueueBatch(ctx, []ledger.Envelope{{Provider: "p", Kind: "k", IdempotencyKey: "a"}, {Provider: "p", Kind: "k", IdempotencyKey: "b"}})
	require.NoError(t, err)
	schema := pgx.Identifier{s.cfg.schema}.Sanitize()
	for _, sql := range []string{
		`CREATE FUNCTION ` + schema + `.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
		`CREATE TRIGGER refuse BEFORE UPDATE ON ` + schema + `.outbox_entries FOR EACH ROW EXECUTE FUNCTION ` + schema + `.refuse()`,
	} {
		_, err := s.pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 10})
	require.Empty(t, cs)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "P0001", pgErr.Code)
	pending, err := o.FindPending(ctx, 10)
	require.NoError(t, err)
	require.Len(t, pending, 2)
	for _, e := range pending {
		require.Nil(t, e.Claim, "%s: nothing was claimed", e.ID)
	}
	require.Equal(t, byte('I'), txStatus(ctx, t, s))
}

// TestTripOutcome pins how oneTrip classifies a failure of its implicit
// transaction.
func TestTripOutcome(t *testing.T) {
	failedStmt := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23505", Message: "duplicate key"}
	pooler := &pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "server conn crashed?"}
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection"}
	refused := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001", Message: "could not serialize access"}
	lost := io.ErrUnexpectedEOF
	scanFailed := errors.New("a row the client could not take")
	for _, c := range []struct {
		name                 string
		failed, err, cerr    error
		wantUnknown, wantErr bool
	}{
		{name: "committed"},
		{name: "a statement failed", failed: failedStmt, wantErr: true},
		{name: "a statement failed, and the end too", failed: failedStmt, cerr: lost, wantErr: true},
		{name: "the connection lost while the answers were read", err: lost, wantUnknown: true, wantErr: true},
		{name: "a row the client could not take: the server commits anyway", err: scanFailed, wantUnknown: true, wantErr: true},
		{name: "every answer read, the end lost", cerr: lost, wantUnknown: true, wantErr: true},
		{name: "every answer read, the commit refused", cerr: refused, wantErr: true},
		{name: "every answer read, the session ended", cerr: fatal, wantUnknown: true, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			unknown, err := tripOutcome(c.failed, c.err, c.cerr)
			assert.Equal(t, c.wantUnknown, unknown, "outcome unknown")
			if c.wantErr {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
	// What readTrip takes for a statement's failure.
	assert.True(t, failedStatement(failedStmt))
	assert.True(t, failedStatement(refused))
	assert.False(t, failedStatement(pooler), "a pooler's lost link: the server may have committed")
	assert.False(t, failedStatement(fatal), "a FATAL may come from a pooler, or after the commit")
	assert.False(t, failedStatement(lost))
}

// TestClaimIsOneRoundTrip counts what a claim sends once its statements
// are prepared.
func TestClaimIsOneRoundTrip(t *testing.T) {
	s, trips, ctx := tripStore(t)
	o := s.Outbox()
	envs := make([]ledger.Envelope, 10)
	for i := range envs {
		envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: string(rune('a' + i))}
	}
	_, err := o.EnqueueBatch(ctx, envs)
	require.NoError(t, err)
	for name, claim := range map[string]func(context.Context, ledger.ClaimRequest) ([]ledger.ClaimedEntry, error){
		"ClaimPending": o.ClaimPending, "ClaimRetryReady": o.ClaimRetryReady, "ClaimDue": o.ClaimDue,
	} {
		n := tripsOf(t, trips, func() {
			_, err := claim(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: 2})
			require.NoError(t, err)
		})
		require.EqualValues(t, 1, n, name)
	}
}

// TestLeaseIsOneRoundTrip counts what a Lease sends once its statements
// are prepared: one round trip while its agent holds no leases under
// other incarnations; after a restart (a new incarnation) the one trip
// grants nothing, and the call takes the old leases back and grants in a
// transaction of its own.
func TestLeaseIsOneRoundTrip(t *testing.T) {
	s, trips, ctx := tripStore(t)
	reqs := make([]ledger.EnqueueRequest, 10)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(string(rune('a' + i))), Target: "host"}
	}
	_, err := s.EnqueueBatch(ctx, reqs, groupT0)
	require.NoError(t, err)
	first := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	var held []ledger.DeliveryID
	n := tripsOf(t, trips, func() {
		r, err := s.Lease(ctx, ledger.LeaseFilter{}, first, groupT0, time.Hour, 2)
		require.NoError(t, err)
		require.Len(t, r.Leased, 2)
		require.Empty(t, r.Reclaimed)
		for _, l := range r.Leased {
			held = append(held, l.Delivery.ID)
		}
	})
	require.EqualValues(t, 1, n, "Lease")
	n = tripsOf(t, trips, func() {
		_, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"host"}}, first, groupT0, time.Hour, 1)
		require.NoError(t, err)
	})
	require.EqualValues(t, 1, n, "Lease by targets")

	r, err := s.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "agent", Incarnation: "boot-2"}, groupT0, time.Hour, 1)
	require.NoError(t, err)
	require.Len(t, r.Reclaimed, 6, "the new incarnation took every lease of the old one back")
	require.Subset(t, r.Reclaimed, held)
	require.Len(t, r.Leased, 1, "and was granted")
}

// TestGroupRoundTrips counts what a group of completions sends once its
// statements are prepared: on records the store holds (its own grants),
// one round trip (the held write); on others, two: BEGIN with the
// locking read, then the write-back, the count changes and COMMIT.
func TestGroupRoundTrips(t *testing.T) {
	const calls = 4
	for _, held := range []bool{true, false} {
		s, trips, ctx := tripStore(t)
		round := 0
		group := func() {
			round++
			ids := make([]ledger.DeliveryID, calls)
			for i := range ids {
				ids[i] = ledger.DeliveryID(fmt.Sprintf("r%d-%d", round, i))
			}
			leases := leasedDeliveries(ctx, t, s, ids...)
			if !held {
				for _, id := range ids {
					s.held.deliveries.cache.drop(string(id))
				}
			}
			fixGroups(s, calls)
			before := trips.Load()
			var wg sync.WaitGroup
			errs := make([]error, calls)
			for i, id := range ids {
				wg.Go(func() {
					var r ledger.DeliveryResult
					if r, errs[i] = s.Acknowledge(ctx, leases[id], "seen", groupT0); errs[i] == nil && !r.Applied() {
						errs[i] = fmt.Errorf("%s: %s", id, r.Outcome)
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			if round > 1 {
				require.EqualValues(t, 1, s.groups.deliveries.groupsRun.Load()-int64(round-1), "one group of every call")
				want := 2
				if held {
					want = 1
				}
				require.EqualValues(t, want, trips.Load()-before, "held: %v", held)
			}
		}
		group() // prepares the statements
		group()
	}
}

// TestOutboxGroupRoundTrips is TestGroupRoundTrips for claim completions:
// a group of them on entries the store claimed is one round trip (the
// held write, its arrays sent pre-encoded), and a write whose parameters
// the server refused would show here as the ordinary path's two.
func TestOutboxGroupRoundTrips(t *testing.T) {
	const calls = 4
	s, trips, ctx := tripStore(t)
	o := s.Outbox()
	round := 0
	group := func() int64 {
		round++
		envs := make([]ledger.Envelope, calls)
		for i := range envs {
			envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("r%d-%d", round, i)}
		}
		_, err := o.EnqueueBatch(ctx, envs)
		require.NoError(t, err)
		claims, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: calls})
		require.NoError(t, err)
		require.Len(t, claims, calls)
		fixGroups(s, calls)
		before := trips.Load()
		var wg sync.WaitGroup
		errs := make([]error, calls)
		for i, c := range claims {
			wg.Go(func() {
				var r ledger.OutboxResult
				if r, errs[i] = o.MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "ref"}); errs[i] == nil && !r.Applied() {
					errs[i] = fmt.Errorf("%s: %s", c.Entry.ID, r.Outcome)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, round, s.groups.entries.groupsRun.Load(), "one group of every call")
		return trips.Load() - before
	}
	group() // prepares the statements
	require.EqualValues(t, 1, group())
	st, err := o.OutboxStats(ctx, groupT0)
	require.NoError(t, err)
	require.EqualValues(t, 2*calls, st.ByStatus[ledger.OutboxStatusDelivered])
}
