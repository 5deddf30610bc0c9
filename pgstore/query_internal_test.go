package pgstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestShardsSpreadAndStay pins the count shards: shardOf must stay what
// migration 0005 computes in SQL (the first byte of the ID's SHA-256,
// modulo 16), or purges would take records off other rows than the ones
// that counted them (TestCountsBackfill checks the SQL side), and it must
// spread IDs over every shard.
func TestShardsSpreadAndStay(t *testing.T) {
	// SHA-256("a") starts with 0xca; SHA-256("abc") with 0xba.
	require.Equal(t, int16(0xca%16), shardOf("a"))
	require.Equal(t, int16(0xba%16), shardOf("abc"))
	seen := map[int16]int{}
	for i := range 1600 {
		seen[shardOf(fmt.Sprintf("delivery-%d", i))]++
	}
	require.Len(t, seen, countShards)
	for sh, n := range seen {
		require.True(t, sh >= 0 && sh < countShards)
		require.Greater(t, n, 50, "shard %d", sh)
	}
}

// TestTransitionsLeaveMetadataOut pins what makes metadata free for the
// transitions: the column lists that the write-back, the group's bulk
// write and the held write are built from leave it out, so no UPDATE
// names it and no transition encodes or compares it; reads return it.
func TestTransitionsLeaveMetadataOut(t *testing.T) {
	for _, c := range []struct {
		name          string
		write, read   []string
		update, lease string
	}{
		{"deliveries", columnNames((&deliveryRow{}).columns()), columnNames((&deliveryRow{}).readColumns()),
			newQueries("s").updateDelivery, newQueries("s").lease[1][1]},
		{"outbox_entries", columnNames((&outboxRow{}).columns()), columnNames((&outboxRow{}).readColumns()),
			newQueries("s").updateEntry, newQueries("s").claimPending},
	} {
		require.NotContains(t, c.write, metadataColumn, c.name)
		require.Equal(t, append(c.write, metadataColumn), c.read, "%s: reads return every column", c.name)
		require.NotContains(t, c.update, metadataColumn, "%s: the write-back", c.name)
		set, _, ok := strings.Cut(c.lease, "RETURNING")
		require.True(t, ok)
		require.NotContains(t, set, metadataColumn, "%s: the grant writes no metadata", c.name)
		require.Contains(t, c.lease, "d."+metadataColumn, "%s: the grant returns it", c.name)
	}
	newRow, err := newDeliveryRow(ledger.Delivery{ID: "d", Metadata: ledger.Metadata{"k": "v"}})
	require.NoError(t, err)
	require.Nil(t, newRow.Metadata, "a transition's row is never given the metadata to write")
}
