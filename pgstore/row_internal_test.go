package pgstore

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnqueueCopyLeavesOutOnlyTheRedriveColumns ties enqueueCopyNames and
// enqueueCopyColumns to the row structs: the columns an enqueue copies are every
// column but redriven_from and redriven_to, version still last, and each
// value goes with its name.
func TestEnqueueCopyLeavesOutOnlyTheRedriveColumns(t *testing.T) {
	for name, cols := range map[string][]column{"deliveries": (&deliveryRow{}).columns(), "outbox_entries": (&outboxRow{}).columns()} {
		names := columnNames(cols)
		want := []string{}
		for _, n := range names {
			if n != "redriven_from" && n != "redriven_to" {
				want = append(want, n)
			}
		}
		require.Len(t, want, len(names)-2, name)
		require.Equal(t, want, enqueueCopyNames(columnNames(cols)), name)
		require.Equal(t, "version", want[len(want)-1], name)
		byName := map[string]any{}
		for _, c := range cols {
			byName[c.name] = c.ptr
		}
		got := enqueueCopyColumns(slices.Clone(cols))
		require.Len(t, got, len(want), name)
		for i, n := range want {
			require.Equal(t, n, got[i].name, name)
			require.Same(t, byName[n], got[i].ptr, "%s: the value of %s", name, n)
		}
	}
}
