package dispatch

import (
	"fmt"
	"reflect"
	"sync"
)

// This file is what the poll loops of one process share about a queue
// they all poll: whether one of them has just looked at it and found it
// drained. Without it every idle loop polls on its own timer, so W
// Dispatchers over one store send W claims per poll interval when there
// is nothing to do, and a process pays for its idle loops in statements
// in proportion to their number. With it an idle loop whose timer fires
// skips its poll when another loop began a cycle after this one went idle
// and that cycle came back short of a full batch: the queue had nothing
// more for anyone when that cycle began, and what arrived since will be
// seen by the next poll. So a process polls an idle queue about once per
// interval, whatever its number of loops; work still waits at most one
// interval, because the loop that made the latest look never skips its
// own next poll.
//
// A wake-up (WithWake) never skips: it says that something committed,
// perhaps after the latest look began. Full cycles record nothing (they
// leave work behind, and idle loops should help with it), nor do failed
// ones.
//
// Loops share only when they see the same queue: the same store value,
// the same filter, and the process's clock (a loop with WithClock keeps
// its own view, since what is due depends on the clock it claims with).

// queueView is the shared view of one queue. Cycle numbers order the
// cycles of every loop sharing it.
type queueView struct {
	mu      sync.Mutex
	started uint64 // cycles begun
	drained uint64 // number of the latest begun cycle that came back short
	users   int    // loops running with this view (sharedViews)
}

// begin records the start of a cycle and returns its number.
func (v *queueView) begin() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.started++
	return v.started
}

// short records that cycle n came back with less than a full batch.
func (v *queueView) short(n uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.drained = max(v.drained, n)
}

// mark returns the number of the latest cycle begun, for lookedSince.
func (v *queueView) mark() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.started
}

// lookedSince reports whether a cycle begun after mark came back short.
func (v *queueView) lookedSince(mark uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.drained > mark
}

// viewKey names a queue: the store and what selects from it.
type viewKey struct {
	store  any
	filter string
}

// sharedViews holds the views of the queues the loops of this process
// poll. It is the package's one piece of process-wide state, on purpose:
// loops built separately over one store (W Dispatchers, as a host with W
// emitters builds them) find each other here without being introduced.
// A view lives while a loop runs with it.
var sharedViews = struct {
	mu sync.Mutex
	m  map[viewKey]*queueView
}{m: map[viewKey]*queueView{}}

// joinView returns the view of the queue of store under filter, shared
// with the other loops of the process that poll it, and the function
// that leaves it. Only a pointer names a queue (the stores are pointers;
// another value may not even compare); a store of another kind, or a loop
// with its own clock, gets a view of its own.
func joinView(store any, filter any, ownClock bool) (*queueView, func()) {
	if ownClock || store == nil || reflect.TypeOf(store).Kind() != reflect.Pointer {
		return &queueView{}, func() {}
	}
	k := viewKey{store: store, filter: fmt.Sprintf("%#v", filter)}
	sharedViews.mu.Lock()
	defer sharedViews.mu.Unlock()
	v := sharedViews.m[k]
	if v == nil {
		v = &queueView{}
		sharedViews.m[k] = v
	}
	v.users++
	var once sync.Once
	return v, func() {
		once.Do(func() {
			sharedViews.mu.Lock()
			defer sharedViews.mu.Unlock()
			if v.users--; v.users == 0 {
				delete(sharedViews.m, k)
			}
		})
	}
}
