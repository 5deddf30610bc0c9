package dispatch

import (
	"context"
	"testing"
	"time"
)

// TestStoreContextsShareWithinATenthOfTheLease: calls that start close
// together share a context bounded by the lease; a context is cancelled
// once no call uses it and new calls no longer take it, never while a
// call still does.
func TestStoreContextsShareWithinATenthOfTheLease(t *testing.T) {
	t.Parallel()
	type key struct{}
	const lease = time.Hour
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	s := newStoreContexts(parent, lease)
	cancelParent()

	first := s.get()
	if first.ctx.Err() != nil {
		t.Fatal("a store context must outlive the cycle's cancelled ctx")
	}
	if first.ctx.Value(key{}) != "v" {
		t.Fatal("a store context must carry the cycle's values")
	}
	if dl, ok := first.ctx.Deadline(); !ok || time.Until(dl) > lease {
		t.Fatalf("deadline %v: want one within the lease", dl)
	}
	if second := s.get(); second != first {
		t.Fatal("calls that start together must share a context")
	}
	s.put(first)

	// The shared context grows older than a tenth of the lease: the next
	// call gets a new one, and the old one lives while a call uses it.
	first.deadline = first.deadline.Add(-lease / 5)
	third := s.get()
	if third == first {
		t.Fatal("a context older than a tenth of the lease must not be taken again")
	}
	if first.ctx.Err() != nil {
		t.Fatal("a context still in use must not be cancelled")
	}
	s.put(first)
	if first.ctx.Err() == nil {
		t.Fatal("a context no call uses and none will take must be cancelled")
	}
	s.put(third)
	if third.ctx.Err() != nil {
		t.Fatal("the context new calls take must live on")
	}
	s.close()
	if third.ctx.Err() == nil {
		t.Fatal("close must cancel the last context")
	}
}
