package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// TestNotMigratedIsASentinel checks that a store whose schema was never
// migrated, or does not exist at all, answers ErrNotMigrated (and
// ledger.ErrUnusable, which the dispatch loops stop on) from every kind of
// call, with the driver's error still inside for errors.As.
func TestNotMigratedIsASentinel(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	empty, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pool)))
	require.NoError(t, err)
	// A name no test makes: the schema itself is missing.
	missing, err := pgstore.New(pool, pgstore.WithSchema("never_migrated_"+string(storekit.NewToken())[:8]))
	require.NoError(t, err)
	owner := ledger.Owner{Agent: "a", Incarnation: "i"}
	for name, s := range map[string]*pgstore.Store{"empty schema": empty, "missing schema": missing} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			calls := map[string]func() error{
				"enqueue": func() error {
					_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t"}, t0)
					return err
				},
				"lease": func() error {
					_, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
					return err
				},
				"get":    func() error { _, err := s.Get(ctx, "d"); return err },
				"expire": func() error { _, err := s.Expire(ctx, t0); return err },
				"claim": func() error {
					_, err := s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 10})
					return err
				},
				"find": func() error { _, err := s.Outbox().FindByID(ctx, "e"); return err },
				"take lead": func() error {
					_, err := s.TakeLead(ctx, "sweep", "h", t0, time.Minute)
					return err
				},
				"purge": func() error { _, err := s.PurgeDeliveries(ctx, t0, 10); return err },
				"enqueue batch": func() error {
					_, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: "d", Target: "t"}}, t0)
					return err
				},
				"acknowledge": func() error {
					_, err := s.Acknowledge(ctx, ledger.Lease{DeliveryID: "d", Token: "tok", Seq: 1}, "", t0)
					return err
				},
				"list":    func() error { _, err := s.List(ctx, ledger.ListQuery{Limit: 10}); return err },
				"stats":   func() error { _, err := s.Stats(ctx, ledger.StatsFilter{}, t0); return err },
				"history": func() error { _, err := s.History(ctx, "d"); return err },
				"outbox enqueue": func() error {
					_, err := s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i"})
					return err
				},
				"outbox enqueue batch": func() error {
					_, err := s.Outbox().EnqueueBatch(ctx, []ledger.Envelope{{Provider: "p", Kind: "k", IdempotencyKey: "i"}})
					return err
				},
				"claim completion": func() error {
					_, err := s.Outbox().MarkClaimDelivered(ctx, ledger.Claim{EntryID: "e", Token: "tok", Seq: 1}, ledger.EmissionResult{})
					return err
				},
				"complete claims": func() error {
					_, err := s.Outbox().CompleteClaims(ctx, []ledger.ClaimCompletion{
						{Claim: ledger.Claim{EntryID: "e", Token: "tok", Seq: 1}, Op: ledger.OpMarkDelivered},
					})
					return err
				},
				"redrive": func() error {
					_, err := s.Redrive(ctx, ledger.RedriveRequest{ID: "d"}, t0)
					return err
				},
				"redrive matching": func() error {
					_, err := s.RedriveMatching(ctx, ledger.RedriveQuery{Limit: 10}, t0)
					return err
				},
				"redrive entry": func() error {
					_, err := s.Outbox().RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: "e"})
					return err
				},
				"list entries": func() error {
					_, err := s.Outbox().ListEntries(ctx, ledger.OutboxListQuery{Limit: 10})
					return err
				},
			}
			for call, f := range calls {
				err := f()
				require.ErrorIs(t, err, pgstore.ErrNotMigrated, call)
				require.ErrorIs(t, err, ledger.ErrUnusable, call)
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "%s: the driver's error stays in the chain", call)
				assert.NotErrorIs(t, err, ledger.ErrNotFound, call)
			}
		})
	}
}

// TestNotMigratedAfterAnUpgrade: a schema migrated by an older build
// lacks the newest tables; a call that needs one says so the same way.
func TestNotMigratedAfterAnUpgrade(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := testContext(t)
	_, err := pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{s.Schema(), "leads"}.Sanitize())
	require.NoError(t, err)
	_, err = s.TakeLead(ctx, "sweep", "h", t0, time.Minute)
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	// The rest of the store still works, and other errors are not taken
	// for a missing schema.
	_, err = s.Get(ctx, "nothing")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	require.NotErrorIs(t, err, pgstore.ErrNotMigrated)
	// A schema from before 0010 has every table and not the redrive
	// links: a call that reads a record says so too.
	for _, table := range []string{"deliveries", "outbox_entries"} {
		_, err = pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{s.Schema(), table}.Sanitize()+" DROP COLUMN redriven_from")
		require.NoError(t, err)
	}
	_, err = s.Get(ctx, "nothing")
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	_, err = s.Outbox().FindByID(ctx, "nothing")
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Lease(cancelled, ledger.LeaseFilter{}, ledger.Owner{Agent: "a", Incarnation: "i"}, t0, time.Minute, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ledger.ErrUnusable)
}
