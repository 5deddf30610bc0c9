package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
)

// TestMetadataIsAJSONObjectOrNull reads the column itself: an item
// without metadata stores SQL NULL (not a JSON null), one with metadata
// a jsonb object, and both read back as memstore answers.
func TestMetadataIsAJSONObjectOrNull(t *testing.T) {
	s, pool := newStore(t)
	ctx := testContext(t)
	md := ledger.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "note": `<"quoted">`}
	mem := memstore.New()
	for id, m := range map[ledger.DeliveryID]ledger.Metadata{"with": md, "nil": nil, "empty": {}} {
		req := ledger.EnqueueRequest{ID: id, Target: "host", Metadata: m}
		got, err := s.Enqueue(ctx, req, t0)
		require.NoError(t, err)
		want, err := mem.Enqueue(ctx, req, t0)
		require.NoError(t, err)
		require.Equal(t, want.Delivery, got.Delivery, "%s: pgstore answers what memstore answers", id)
	}
	for _, env := range []ledger.Envelope{
		{Provider: "p", Kind: "k", IdempotencyKey: "with", Metadata: md},
		{Provider: "p", Kind: "k", IdempotencyKey: "none"},
	} {
		_, err := s.Outbox().Enqueue(ctx, env)
		require.NoError(t, err)
	}

	kinds := func(table string) map[string]string {
		rows, err := pool.Query(ctx, "SELECT id, coalesce(jsonb_typeof(metadata), 'SQL NULL') FROM "+
			pgx.Identifier{s.Schema(), table}.Sanitize())
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var id, kind string
			require.NoError(t, rows.Scan(&id, &kind))
			out[id] = kind
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, map[string]string{"with": "object", "nil": "SQL NULL", "empty": "SQL NULL"}, kinds("deliveries"))
	require.Equal(t, map[string]string{
		string(ledger.OutboxEntryIDFor("with")): "object",
		string(ledger.OutboxEntryIDFor("none")): "SQL NULL",
	}, kinds("outbox_entries"))
}

// TestTransitionsNeverWriteMetadata changes the metadata column behind
// the store's back after the grants, then drives every transition through
// each of the store's write paths: had any of them written the column, it
// would have put back the metadata it read at the grant. Held: the rows
// are still at the version the store holds, so the held writes decide
// the completions. Locked: the version moved too, so the completions are
// decided again under the rows' locks, by a group transaction's bulk
// write or a single call's write-back. The sweep and the fenced
// MarkProcessed take the locking path in every case.
func TestTransitionsNeverWriteMetadata(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []pgstore.Option
		moveAlong bool
	}{
		{"GroupCommit/Held", nil, false},
		{"GroupCommit/Locked", nil, true},
		{"SingleCalls/Held", []pgstore.Option{pgstore.WithGroupCommit(false)}, false},
		{"SingleCalls/Locked", []pgstore.Option{pgstore.WithGroupCommit(false)}, true},
	} {
		opts := tc.opts
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, pool := newStore(t, opts...)
			ctx := testContext(t)
			md := ledger.Metadata{"traceparent": "at enqueue"}
			for _, id := range []ledger.DeliveryID{"processed", "failed", "released", "renewed"} {
				_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host", Metadata: md}, t0)
				require.NoError(t, err)
			}
			owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
			lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
			require.NoError(t, err)
			require.Len(t, lr.Leased, 4)
			leases := map[ledger.DeliveryID]ledger.Lease{}
			for _, ld := range lr.Leased {
				require.Equal(t, md, ld.Delivery.Metadata)
				leases[ld.Delivery.ID] = ld.Lease
			}
			o := s.Outbox()
			for _, key := range []string{"delivered", "retried", "deferred", "released"} {
				_, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key, Metadata: md})
				require.NoError(t, err)
			}
			claimed, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 10})
			require.NoError(t, err)
			require.Len(t, claimed, 4)

			behind := `{"traceparent": "behind the store's back"}`
			setMetadata(ctx, t, pool, s.Schema(), behind, tc.moveAlong)

			now := t0.Add(time.Second)
			_, err = s.RenewLease(ctx, leases["renewed"], now, time.Minute)
			require.NoError(t, err)
			_, err = s.Acknowledge(ctx, leases["processed"], "seen", now)
			require.NoError(t, err)
			_, err = s.MarkProcessed(ctx, "processed", owner, ledger.FenceOf(1), "done", now)
			require.NoError(t, err)
			_, err = s.MarkFailed(ctx, leases["failed"], ledger.FailureReason{Message: "no"}, now)
			require.NoError(t, err)
			_, err = s.Release(ctx, leases["released"], now)
			require.NoError(t, err)
			_, err = s.Expire(ctx, now.Add(time.Hour))
			require.NoError(t, err)
			next := now.Add(time.Minute)
			for _, ce := range claimed {
				var res ledger.OutboxResult
				switch ce.Entry.Envelope.IdempotencyKey {
				case "delivered":
					res, err = o.MarkClaimDelivered(ctx, ce.Claim, ledger.EmissionResult{ProviderRef: "ref"})
				case "retried":
					res, err = o.MarkClaimFailed(ctx, ce.Claim, ledger.EmissionError{Message: "busy"}, &next)
				case "deferred":
					e := ce.Entry
					e.Status, e.NextAttemptAt = ledger.OutboxStatusDeferred, next
					e.Envelope.Metadata = ledger.Metadata{"traceparent": "in the saved entry"}
					res, err = o.SaveClaim(ctx, ce.Claim, e)
				case "released":
					res, err = o.ReleaseClaim(ctx, ce.Claim, "stop")
				}
				require.NoError(t, err)
				require.True(t, res.Applied(), "%s: %s", ce.Entry.Envelope.IdempotencyKey, res.Outcome)
			}

			for _, table := range []string{"deliveries", "outbox_entries"} {
				var stale int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.Schema(), table}.Sanitize()+
					" WHERE metadata IS DISTINCT FROM $1::jsonb", behind).Scan(&stale))
				require.Zero(t, stale, "%s: a transition wrote the metadata column", table)
			}
			got, err := s.Get(ctx, "processed")
			require.NoError(t, err)
			require.Equal(t, ledger.Metadata{"traceparent": "behind the store's back"}, got.Metadata, "reads return the column")
		})
	}
}

// setMetadata overwrites the metadata of every record of schema and, with
// moveAlong, bumps their versions, as another process's write would.
func setMetadata(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, md string, moveAlong bool) {
	t.Helper()
	for _, table := range []string{"deliveries", "outbox_entries"} {
		_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, table}.Sanitize()+
			" SET metadata = $1::jsonb, version = version + CASE WHEN $2 THEN 1 ELSE 0 END", md, moveAlong)
		require.NoError(t, err)
	}
}
