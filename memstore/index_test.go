package memstore

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTree verifies the structure of t: keys strictly ascending across the
// whole tree, every leaf at one depth, node sizes within bounds, and a
// count that matches. It returns the keys in order.
func checkTree[K ordered[K]](t *btree[K]) ([]K, error) {
	var keys []K
	leafDepth := -1
	var walk func(n *bnode[K], depth int, root bool) error
	walk = func(n *bnode[K], depth int, root bool) error {
		if len(n.items) > maxItems {
			return fmt.Errorf("node with %d items", len(n.items))
		}
		if !root && len(n.items) == 0 {
			return fmt.Errorf("empty non-root node at depth %d", depth)
		}
		if n.leaf() {
			if leafDepth == -1 {
				leafDepth = depth
			} else if leafDepth != depth {
				return fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			keys = append(keys, n.items...)
			return nil
		}
		if len(n.kids) != len(n.items)+1 {
			return fmt.Errorf("node with %d items and %d kids", len(n.items), len(n.kids))
		}
		for i, kid := range n.kids {
			if err := walk(kid, depth+1, false); err != nil {
				return err
			}
			if i < len(n.items) {
				keys = append(keys, n.items[i])
			}
		}
		return nil
	}
	if t.root != nil {
		if err := walk(t.root, 0, true); err != nil {
			return nil, err
		}
		if len(t.root.items) == 0 && !t.root.leaf() {
			return nil, fmt.Errorf("empty inner root left in place")
		}
	}
	order := t.order()
	for i := 1; i < len(keys); i++ {
		if order(keys[i-1], keys[i]) >= 0 {
			return nil, fmt.Errorf("keys out of order at %d: %v then %v", i, keys[i-1], keys[i])
		}
	}
	if len(keys) != t.Len() {
		return nil, fmt.Errorf("Len() = %d, tree holds %d", t.Len(), len(keys))
	}
	return keys, nil
}

// collect walks a cursor to its end.
func collect[K ordered[K]](c cursor[K]) []K {
	var out []K
	for k, ok := c.next(); ok; k, ok = c.next() {
		out = append(out, k)
	}
	return out
}

func TestBTreeMatchesSortedSlice(t *testing.T) {
	t.Parallel()
	// Key spaces of different density make duplicates, absent deletes,
	// merges and splits all common; patterns cover random, ascending and
	// descending arrival.
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, seed*7919))
			space := []int{50, 500, 5000}[seed%3]
			var tree btree[timeKey]
			var ref []timeKey
			mk := func() timeKey {
				v := rng.IntN(space)
				switch seed % 4 {
				case 1: // mostly ascending, like times
					v = len(ref)*2 + rng.IntN(3)
				case 2: // mostly descending
					v = space*4 - len(ref)*2 - rng.IntN(3)
				}
				return timeKey{at: int64(v / 3), id: fmt.Sprintf("id-%05d", v)}
			}
			for op := range 3000 {
				k := mk()
				pos, present := slices.BinarySearchFunc(ref, k, timeKey.compare)
				if rng.IntN(100) < 60 || len(ref) == 0 {
					require.Equal(t, !present, tree.insert(k), "insert %v", k)
					if !present {
						ref = slices.Insert(ref, pos, k)
					}
				} else {
					if rng.IntN(2) == 0 { // delete something present
						pos = rng.IntN(len(ref))
						k, present = ref[pos], true
					}
					require.Equal(t, present, tree.delete(k), "delete %v", k)
					if present {
						ref = slices.Delete(ref, pos, pos+1)
					}
				}
				if op%97 == 0 || op == 2999 {
					keys, err := checkTree(&tree)
					require.NoError(t, err)
					require.Equal(t, keysOrNil(ref), keysOrNil(keys))
					// A seek from a random key yields the tail of the reference.
					from := mk()
					at, _ := slices.BinarySearchFunc(ref, from, timeKey.compare)
					require.Equal(t, keysOrNil(ref[at:]), keysOrNil(collect(tree.seek(from))))
				}
			}
			// Drain to empty: the tree must end with no root.
			for _, k := range slices.Clone(ref) {
				require.True(t, tree.delete(k))
			}
			assert.True(t, tree.root == nil || (tree.root.leaf() && len(tree.root.items) == 0))
			assert.Zero(t, tree.Len())
			assert.Zero(t, tree.height())
			assert.Empty(t, collect(tree.first()))
		})
	}
}

func keysOrNil[K any](ks []K) []K {
	if len(ks) == 0 {
		return nil
	}
	return ks
}

func TestBTreeIDKeys(t *testing.T) {
	t.Parallel()
	var tree btree[idKey]
	ids := []idKey{"b", "a", "c", "ab", "é", "A", ""}
	for _, id := range ids {
		assert.True(t, tree.insert(id))
	}
	assert.False(t, tree.insert("ab"))
	assert.True(t, tree.has("é"))
	assert.False(t, tree.has("zz"))
	// Byte order, not collation.
	assert.Equal(t, []idKey{"", "A", "a", "ab", "b", "c", "é"}, collect(tree.first()))
	assert.Equal(t, []idKey{"ab", "b", "c", "é"}, collect(tree.seek("aa")))
}

// TestBTreeStaysLogarithmic counts node visits: an insert, delete or seek
// touches about one node per level (plus rebalancing neighbours), and the
// height grows with log n. It would fail if any operation scanned the
// tree.
func TestBTreeStaysLogarithmic(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1_000, 100_000} {
		var tree btree[timeKey]
		for i := range n {
			tree.insert(timeKey{at: int64(i), id: "x"})
		}
		// log base (minItems+1) of n, plus slack for the root.
		maxHeight := 2 + bits.Len(uint(n))/4
		h := tree.height()
		assert.LessOrEqual(t, h, maxHeight, "height at n=%d", n)

		tree.visits = 0
		for i := range 100 {
			tree.delete(timeKey{at: int64(i * (n / 100)), id: "x"})
			tree.insert(timeKey{at: int64(n + i), id: "x"})
			c := tree.seek(timeKey{at: int64(i * 7), id: "x"})
			_, _ = c.next()
		}
		perOp := float64(tree.visits) / 300
		assert.LessOrEqual(t, perOp, float64(2*h+2), "visits per op at n=%d", n)

		// Sequential inserts keep nodes nearly full: far fewer nodes
		// than a half-full tree would have.
		nodes := 0
		var count func(*bnode[timeKey])
		count = func(nd *bnode[timeKey]) {
			nodes++
			for _, k := range nd.kids {
				count(k)
			}
		}
		count(tree.root)
		assert.Less(t, nodes, n/(maxItems*3/4)+10, "nodes at n=%d", n)
	}
}

// TestCursorSpillsPastInlinePath walks a tree deeper than the cursor's
// inline path. Real trees never get there (it takes billions of keys), so
// the test builds a thin one by hand: every node one key, two children.
func TestCursorSpillsPastInlinePath(t *testing.T) {
	t.Parallel()
	next := 0
	var build func(depth int) *bnode[idKey]
	build = func(depth int) *bnode[idKey] {
		if depth == 1 {
			next++
			return &bnode[idKey]{items: []idKey{idKey(fmt.Sprintf("%06d", next))}}
		}
		left := build(depth - 1)
		next++
		mid := idKey(fmt.Sprintf("%06d", next))
		right := build(depth - 1)
		return &bnode[idKey]{items: []idKey{mid}, kids: []*bnode[idKey]{left, right}}
	}
	tree := btree[idKey]{root: build(12)}
	tree.count = next
	keys, err := checkTree(&tree)
	require.NoError(t, err)
	require.Len(t, keys, 4095)
	assert.Equal(t, keys, collect(tree.first()))
	assert.Equal(t, keys[1234:], collect(tree.seek(keys[1234])))
	assert.Equal(t, keys[1235:], collect(tree.seek(keys[1234]+"~")))
	// And it still takes deletes and inserts.
	for _, k := range keys[:2000] {
		require.True(t, tree.delete(k))
	}
	require.True(t, tree.insert("000000"))
	got, err := checkTree(&tree)
	require.NoError(t, err)
	assert.Equal(t, append([]idKey{"000000"}, keys[2000:]...), got)
}
