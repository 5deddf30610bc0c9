package pgstore

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// setColumn matches the column a line of a grant's SET list writes.
var setColumn = regexp.MustCompile(`(?m)^\s*([a-z_]+) = `)

// TestGrantColumnsAreTheColumnsTheGrantsSet checks the lists from which
// Lease and the claims rebuild a record as it was before its grant: a
// column the grant writes but the list lacks would come back with its new
// value, and the history entry would be built from the wrong record.
func TestGrantColumnsAreTheColumnsTheGrantsSet(t *testing.T) {
	for _, c := range []struct {
		set     string
		columns []string
		indexes []int
		cols    []column
	}{
		{deliveryGrantSet, deliveryGrantColumns, deliveryGrantIndexes, (&deliveryRow{}).columns()},
		{outboxGrantSet, outboxGrantColumns, outboxGrantIndexes, (&outboxRow{}).columns()},
	} {
		var set []string
		for _, m := range setColumn.FindAllStringSubmatch(c.set, -1) {
			set = append(set, m[1])
		}
		require.NotEmpty(t, set)
		require.ElementsMatch(t, set, c.columns)
		require.Len(t, c.indexes, len(c.columns))
		for i, j := range c.indexes {
			require.GreaterOrEqual(t, j, 0, "%s is no column of the row", c.columns[i])
			require.Equal(t, c.columns[i], c.cols[j].name)
		}
		require.False(t, slices.Contains(c.columns, "id"), "the grant never changes the ID")
	}
}

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
