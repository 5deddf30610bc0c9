package pgstore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
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
