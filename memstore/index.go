package memstore

import (
	"slices"
	"strings"
)

// This file is the ordered set behind every index of the store: a small
// in-memory B-tree. Items live in arrays inside the nodes, so an index costs
// a few dozen bytes per item instead of a heap node per item, and a lookup,
// insert or delete visits O(log n) nodes.

// ordered is what an index key provides: a three-way comparison.
type ordered[K any] interface {
	compare(other K) int
}

// timeKey orders records by a time (Unix microseconds), then by ID. Most
// time indexes use it: offers by AvailableAt, leases by ExpiresAt,
// acknowledgements by Deadline, outbox entries by NextAttemptAt (pending
// outbox entries use seqKey).
type timeKey struct {
	at int64
	id string
}

func (a timeKey) compare(b timeKey) int {
	switch {
	case a.at < b.at:
		return -1
	case a.at > b.at:
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// seqKey orders records by a time (Unix microseconds), then by a sequence
// number that grows with every record added, then by ID. The outbox's
// pending index uses it with the enqueue sequence, so that entries created
// at the same instant (one EnqueueBatch, or enqueues within a microsecond)
// come in the order they were enqueued, not in the order of their hashed
// IDs. The sequence is unique within an Outbox; the ID only makes the
// order total.
type seqKey struct {
	at  int64
	seq uint64
	id  string
}

func (a seqKey) compare(b seqKey) int {
	switch {
	case a.at < b.at:
		return -1
	case a.at > b.at:
		return 1
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// slotKey orders records by a time (Unix microseconds), then by record
// number (the record's slot in the store's table). It holds no pointer, so
// index nodes built of slot keys are never scanned by the garbage collector
// and moving them needs no write barrier. Its own order breaks ties by
// slot; the offer indexes, which must break ties by ID, set a comparator
// that looks the IDs up (Store.offerOrder).
type slotKey struct {
	at   int64
	slot uint32
}

func (a slotKey) compare(b slotKey) int {
	switch {
	case a.at < b.at:
		return -1
	case a.at > b.at:
		return 1
	case a.slot < b.slot:
		return -1
	case a.slot > b.slot:
		return 1
	}
	return 0
}

// idKey orders records by ID in byte order, the order of List.
type idKey string

func (a idKey) compare(b idKey) int { return strings.Compare(string(a), string(b)) }

// Node bounds. A node holds at most maxItems items; before the delete path
// descends into a child it makes sure the child has more than minItems, so
// that two children can always merge into one node (2*minItems+1 <=
// maxItems). Other nodes may hold fewer items than minItems: the split
// below keeps nodes nearly full when keys arrive in order (which is how
// times and most IDs arrive), at the price of the textbook lower bound.
const (
	maxItems = 31
	minItems = maxItems / 2
)

// btree is an ordered set of keys. The zero value is an empty set. It is
// not safe for concurrent use: the store's mutex guards it.
type btree[K ordered[K]] struct {
	root  *bnode[K]
	count int
	// visits counts nodes touched by searches, inserts and deletes. Tests
	// read it to check that operations stay logarithmic.
	visits int
	// cmp, when set, orders the keys instead of K.compare: an index whose
	// order needs more than its keys hold sets it before the first insert
	// and never changes it.
	cmp func(a, b K) int
}

// order returns the comparison that orders t.
func (t *btree[K]) order() func(a, b K) int {
	if t.cmp != nil {
		return t.cmp
	}
	return K.compare
}

type bnode[K ordered[K]] struct {
	items []K
	kids  []*bnode[K] // nil for a leaf; else len(items)+1 children
}

func (n *bnode[K]) leaf() bool { return len(n.kids) == 0 }

// search returns the index of the first item not less than k, and whether
// that item equals k.
func (n *bnode[K]) search(k K, cmp func(a, b K) int) (int, bool) {
	lo, hi := 0, len(n.items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if cmp(n.items[m], k) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.items) && cmp(n.items[lo], k) == 0
}

// searchEnds is search for inserts and deletes. It tries both ends of the
// node before bisecting: indexes are mostly queues, whose keys go in after
// the last one (times arrive in order) and leave from the front, and then
// one comparison settles a node instead of log2(maxItems).
func (n *bnode[K]) searchEnds(k K, cmp func(a, b K) int) (int, bool) {
	last := len(n.items) - 1
	if last < 0 {
		return 0, false
	}
	if c := cmp(n.items[last], k); c <= 0 {
		if c == 0 {
			return last, true
		}
		return last + 1, false
	}
	if c := cmp(n.items[0], k); c >= 0 {
		return 0, c == 0
	}
	return n.search(k, cmp)
}

// Len returns the number of keys in the set.
func (t *btree[K]) Len() int { return t.count }

// has reports whether k is in the set.
func (t *btree[K]) has(k K) bool {
	cmp := t.order()
	for n := t.root; n != nil; {
		t.visits++
		i, found := n.search(k, cmp)
		if found {
			return true
		}
		if n.leaf() {
			return false
		}
		n = n.kids[i]
	}
	return false
}

// insert adds k; it reports false when k was already there.
func (t *btree[K]) insert(k K) bool {
	cmp := t.order()
	if t.root == nil {
		t.root = &bnode[K]{items: make([]K, 0, 4)}
	}
	if len(t.root.items) >= maxItems {
		old := t.root
		median, right := old.split(splitPoint(old, k, cmp))
		t.root = &bnode[K]{items: []K{median}, kids: []*bnode[K]{old, right}}
	}
	n := t.root
	for {
		t.visits++
		i, found := n.searchEnds(k, cmp)
		if found {
			return false
		}
		if n.leaf() {
			n.items = slices.Insert(n.items, i, k)
			t.count++
			return true
		}
		child := n.kids[i]
		if len(child.items) >= maxItems {
			// Split a full child before entering it, so that the leaf
			// always has room and no split ever has to walk back up.
			median, right := child.split(splitPoint(child, k, cmp))
			n.items = slices.Insert(n.items, i, median)
			n.kids = slices.Insert(n.kids, i+1, right)
			switch c := cmp(k, median); {
			case c == 0:
				return false
			case c > 0:
				child = right
			}
		}
		n = child
	}
}

// splitPoint chooses where a full node splits before k goes in. Keys past
// the node's last item (times and sequential IDs arriving in order) leave
// the left node nearly full instead of half full; keys before its first
// item do the mirror image. Other keys split in the middle.
func splitPoint[K ordered[K]](n *bnode[K], k K, cmp func(a, b K) int) int {
	switch {
	case cmp(k, n.items[len(n.items)-1]) > 0:
		return len(n.items) - 2
	case cmp(k, n.items[0]) < 0:
		return 1
	}
	return len(n.items) / 2
}

// split moves the items after m (and their children) into a new right
// sibling and returns the item at m, which goes up to the parent.
func (n *bnode[K]) split(m int) (K, *bnode[K]) {
	median := n.items[m]
	right := &bnode[K]{items: append(make([]K, 0, maxItems), n.items[m+1:]...)}
	clear(n.items[m:]) // drop references held by the vacated slots
	n.items = n.items[:m]
	if !n.leaf() {
		right.kids = append(make([]*bnode[K], 0, maxItems+1), n.kids[m+1:]...)
		clear(n.kids[m+1:])
		n.kids = n.kids[:m+1]
	}
	return median, right
}

// delete removes k; it reports false when k was not there.
func (t *btree[K]) delete(k K) bool {
	if t.root == nil {
		return false
	}
	cmp := t.order()
	removed := false
	n := t.root
	for {
		t.visits++
		i, found := n.searchEnds(k, cmp)
		if n.leaf() {
			if found {
				n.items = slices.Delete(n.items, i, i+1)
				removed = true
			}
			break
		}
		if len(n.kids[i].items) <= minItems {
			// Make sure the child can lose an item before entering it;
			// the rotation or merge may move k, so search again.
			n.grow(i)
			i, found = n.searchEnds(k, cmp)
		}
		if found {
			n.items[i] = n.kids[i].popMax(&t.visits)
			removed = true
			break
		}
		n = n.kids[i]
	}
	// An emptied root leaf stays, with its array: an index that empties
	// and refills (a queue kept short) then allocates nothing.
	if len(t.root.items) == 0 && !t.root.leaf() {
		t.root = t.root.kids[0]
	}
	if removed {
		t.count--
	}
	return removed
}

// popMax removes and returns the largest item of n's subtree. The caller
// guarantees n holds at least two items.
func (n *bnode[K]) popMax(visits *int) K {
	for {
		*visits++
		if n.leaf() {
			last := len(n.items) - 1
			k := n.items[last]
			clear(n.items[last:])
			n.items = n.items[:last]
			return k
		}
		i := len(n.kids) - 1
		if len(n.kids[i].items) <= minItems {
			n.grow(i)
			i = len(n.kids) - 1
		}
		n = n.kids[i]
	}
}

// grow gives child i at least one more item: it borrows one through the
// parent from a sibling that can spare it, or merges the child with a
// sibling. n holds at least one item.
func (n *bnode[K]) grow(i int) {
	child := n.kids[i]
	switch {
	case i > 0 && len(n.kids[i-1].items) > minItems:
		left := n.kids[i-1]
		last := len(left.items) - 1
		child.items = slices.Insert(child.items, 0, n.items[i-1])
		n.items[i-1] = left.items[last]
		clear(left.items[last:])
		left.items = left.items[:last]
		if !child.leaf() {
			lk := len(left.kids) - 1
			child.kids = slices.Insert(child.kids, 0, left.kids[lk])
			left.kids[lk] = nil
			left.kids = left.kids[:lk]
		}
	case i < len(n.items) && len(n.kids[i+1].items) > minItems:
		right := n.kids[i+1]
		child.items = append(child.items, n.items[i])
		n.items[i] = right.items[0]
		right.items = slices.Delete(right.items, 0, 1)
		if !child.leaf() {
			child.kids = append(child.kids, right.kids[0])
			right.kids = slices.Delete(right.kids, 0, 1)
		}
	default:
		if i == len(n.items) {
			i--
			child = n.kids[i]
		}
		right := n.kids[i+1]
		child.items = append(child.items, n.items[i])
		child.items = append(child.items, right.items...)
		child.kids = append(child.kids, right.kids...)
		n.items = slices.Delete(n.items, i, i+1)
		n.kids = slices.Delete(n.kids, i+1, i+2)
	}
}

// countWhile returns how many keys, from the smallest on, come before the
// first key for which in is false; in must hold for a prefix of the order
// (a bound on the key's time, say). It adds up whole leaves instead of
// stepping key by key, so it costs one visit per node of that prefix,
// O(log n + k/minItems) for k keys counted, and it never looks at what a
// key stands for.
func (t *btree[K]) countWhile(in func(K) bool) int {
	if t.root == nil {
		return 0
	}
	n, _ := t.root.countWhile(in, &t.visits)
	return n
}

// countWhile counts the keys of n's subtree before the first for which in
// is false, and reports whether it met that key.
func (n *bnode[K]) countWhile(in func(K) bool, visits *int) (int, bool) {
	*visits++
	if n.leaf() {
		if len(n.items) == 0 || in(n.items[len(n.items)-1]) {
			return len(n.items), false
		}
		i := 0
		for i < len(n.items) && in(n.items[i]) {
			i++
		}
		return i, true
	}
	count := 0
	for i, k := range n.items {
		c, stop := n.kids[i].countWhile(in, visits)
		count += c
		if stop || !in(k) {
			return count, true
		}
		count++
	}
	c, stop := n.kids[len(n.items)].countWhile(in, visits)
	return count + c, stop
}

// cursor walks a btree in ascending order. A cursor is invalidated by any
// insert or delete on its tree: callers collect what they need first and
// change the tree afterwards.
//
// The path is kept in an array inside the cursor, so that a walk allocates
// nothing for any tree of realistic size (16^8 keys); deeper trees spill
// into a slice.
type cursor[K ordered[K]] struct {
	inline [8]frame[K]
	spill  []frame[K]
	depth  int
	visits *int // the tree's node visit counter
}

// frame is one node on a cursor's path. For a leaf, items[i] is the next
// item; for an inner node, children[i] is being walked (it is above this
// frame on the path) and items[i] comes after it.
type frame[K ordered[K]] struct {
	n *bnode[K]
	i int
}

func (c *cursor[K]) push(n *bnode[K], i int) {
	*c.visits++
	if c.depth < len(c.inline) {
		c.inline[c.depth] = frame[K]{n, i}
	} else {
		c.spill = append(c.spill[:c.depth-len(c.inline)], frame[K]{n, i})
	}
	c.depth++
}

func (c *cursor[K]) top() *frame[K] {
	if c.depth <= len(c.inline) {
		return &c.inline[c.depth-1]
	}
	return &c.spill[c.depth-1-len(c.inline)]
}

// seek returns a cursor at the first key not less than from.
func (t *btree[K]) seek(from K) cursor[K] {
	c := cursor[K]{visits: &t.visits}
	cmp := t.order()
	for n := t.root; n != nil; {
		i, _ := n.search(from, cmp)
		c.push(n, i)
		if n.leaf() {
			break
		}
		n = n.kids[i]
	}
	return c
}

// first returns a cursor at the smallest key.
func (t *btree[K]) first() cursor[K] {
	c := cursor[K]{visits: &t.visits}
	c.descend(t.root)
	return c
}

// descend pushes the leftmost path of n's subtree.
func (c *cursor[K]) descend(n *bnode[K]) {
	for n != nil {
		c.push(n, 0)
		if n.leaf() {
			return
		}
		n = n.kids[0]
	}
}

// next returns the key under the cursor and moves past it; false when the
// walk is over.
func (c *cursor[K]) next() (K, bool) {
	for c.depth > 0 {
		top := c.top()
		if top.i < len(top.n.items) {
			k := top.n.items[top.i]
			top.i++
			if !top.n.leaf() {
				c.descend(top.n.kids[top.i])
			}
			return k, true
		}
		c.depth--
	}
	var zero K
	return zero, false
}

// height returns the number of levels of the tree (0 when empty).
func (t *btree[K]) height() int {
	h := 0
	for n := t.root; n != nil && len(n.items) > 0; n = firstKid(n) {
		h++
	}
	return h
}

func firstKid[K ordered[K]](n *bnode[K]) *bnode[K] {
	if n.leaf() {
		return nil
	}
	return n.kids[0]
}
