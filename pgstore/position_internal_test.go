package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

func TestParsePos(t *testing.T) {
	for in, want := range map[string]tuplePos{
		"(0,1)":              {0, 1},
		"(4294967295,65535)": {4294967295, 65535},
		"(12,7)":             {12, 7},
		"":                   {},
		"(12,7":              {},
		"12,7":               {},
		"(12)":               {},
		"(x,7)":              {},
		"(1,65536)":          {},
		"(-1,2)":             {},
	} {
		require.Equal(t, want, parsePos([]byte(in)), "%q", in)
	}
}

// rowPos reads where the live version of row id of table lies.
func rowPos(ctx context.Context, t *testing.T, s *Store, table, id string) tuplePos {
	t.Helper()
	var tid pgtype.TID
	require.NoError(t, s.db.QueryRow(ctx, "SELECT ctid FROM "+pgx.Identifier{s.cfg.schema, table}.Sanitize()+" WHERE id = $1", id).Scan(&tid))
	return posOf(tid)
}

// moveRows writes a new version of each row of ids without a new
// version number, as an operator's UPDATE or a table rewrite would: the
// positions the store holds no longer name them.
func moveRows(ctx context.Context, t *testing.T, s *Store, table string, ids []string) {
	t.Helper()
	tag, err := s.db.Exec(ctx, "UPDATE "+pgx.Identifier{s.cfg.schema, table}.Sanitize()+" SET payload = payload WHERE id = ANY($1)", ids)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), tag.RowsAffected())
}

// TestHeldWritesFollowTheirRows: a grant keeps the position of each
// version it wrote, a held write finds the row there and keeps the
// position of the version it wrote in turn; a row that moved without a
// new version (its held position stale) is still written, once, by the
// ordinary path, and its next write goes by ID.
func TestHeldWritesFollowTheirRows(t *testing.T) {
	t.Run("Deliveries", func(t *testing.T) {
		s, ctx := groupTestStore(t)
		var ids []ledger.DeliveryID
		var names []string
		for i := range 8 {
			ids = append(ids, ledger.DeliveryID(fmt.Sprintf("d%d", i)))
			names = append(names, string(ids[i]))
		}
		leases := leasedDeliveries(ctx, t, s, ids...)
		held := func(id string) tuplePos {
			_, pos, ok := s.held.deliveries.cache.get(id)
			require.True(t, ok, id)
			return pos
		}
		for _, id := range names {
			require.Equal(t, rowPos(ctx, t, s, "deliveries", id), held(id), "%s: the grant's position", id)
		}
		moved := names[:4]
		moveRows(ctx, t, s, "deliveries", moved)
		owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
		for _, id := range ids {
			res, err := s.Acknowledge(ctx, leases[id], "seen", groupT0)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome, id)
			require.Equal(t, ledger.DeliveryStateAcknowledged, res.Delivery.State, id)
			require.EqualValues(t, 3, res.Delivery.Version, "%s: written once", id)
		}
		for i, id := range names {
			if i < len(moved) {
				require.False(t, held(id).known(), "%s: written by the ordinary path, which reads no position", id)
				continue
			}
			require.Equal(t, rowPos(ctx, t, s, "deliveries", id), held(id), "%s: the held write's position", id)
		}
		for _, id := range ids {
			res, err := s.MarkProcessed(ctx, id, owner, nil, ledger.ActionRef("a-1"), groupT0.Add(time.Second))
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome, id)
			d, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, ledger.DeliveryStateProcessed, d.State, id)
			require.EqualValues(t, 4, d.Version, id)
		}
	})
	t.Run("Entries", func(t *testing.T) {
		s, ctx := groupTestStore(t)
		o := s.Outbox()
		var reqs []ledger.Envelope
		for i := range 8 {
			reqs = append(reqs, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("key-%d", i)})
		}
		_, err := o.EnqueueBatch(ctx, reqs)
		require.NoError(t, err)
		claimed, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: groupT0, LeaseDuration: time.Hour, Limit: len(reqs)})
		require.NoError(t, err)
		require.Len(t, claimed, len(reqs))
		held := func(id string) tuplePos {
			_, pos, ok := s.held.entries.cache.get(id)
			require.True(t, ok, id)
			return pos
		}
		var moved []string
		for i, c := range claimed {
			id := string(c.Entry.ID)
			require.Equal(t, rowPos(ctx, t, s, "outbox_entries", id), held(id), "%s: the claim's position", id)
			if i%2 == 0 {
				moved = append(moved, id)
			}
		}
		moveRows(ctx, t, s, "outbox_entries", moved)
		for _, c := range claimed {
			res, err := o.MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "ref"})
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome, c.Entry.ID)
			e, err := o.FindByID(ctx, c.Entry.ID)
			require.NoError(t, err)
			require.Equal(t, ledger.OutboxStatusDelivered, e.Status, c.Entry.ID)
			require.Equal(t, c.Entry.Version+1, e.Version, "%s: written once", c.Entry.ID)
		}
	})
}
