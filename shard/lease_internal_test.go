package shard

import (
	"math"
	"testing"
)

// The rotation counter is a uint64 turned into an int: past the largest
// int it reads negative, and a share must still land on a shard.
func TestSharesWithACounterPastTheLargestInt(t *testing.T) {
	for _, start := range []int{math.MinInt, -1, 0, 5, math.MaxInt} {
		for round := range 2 {
			total := 0
			for _, n := range shares(round, 7, 3, start) {
				total += n
			}
			if total != 7 {
				t.Errorf("round %d from %d: shares add to %d, want 7", round, start, total)
			}
		}
	}
}
