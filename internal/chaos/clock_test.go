package chaos

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// This file is the state all workers share, the child process included:
// the logical clock, the counters that hand out item numbers and fences,
// and the progress counters that time the faults.

// t0 is the origin of the logical clock.
var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// The slots of shared.
const (
	slotClock      = iota // logical microseconds since t0
	slotDeliveries        // delivery numbers handed out
	slotEntries           // outbox entry numbers handed out
	slotFences            // first of numTargets: the last fence handed out per target
	numSlots       = slotFences + numTargets
)

// shared is a few counters, updated atomically. For a run with a child
// process they live in a file mapped into both processes, so that the
// child reads the same clock and takes numbers from the same counters.
type shared struct {
	slots []int64
	unmap func() error
}

func newShared() *shared {
	return &shared{slots: make([]int64, numSlots), unmap: func() error { return nil }}
}

// mapShared maps the counters in the file at path, creating it (zeroed)
// if it does not exist. Call unmap once no goroutine uses them any more.
func mapShared(path string) (*shared, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	const size = numSlots * 8
	if err := f.Truncate(size); err != nil {
		return nil, err
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	// The mapping is page-aligned, so every slot is 8-byte aligned.
	slots := unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), numSlots)
	return &shared{slots: slots, unmap: func() error { return syscall.Munmap(b) }}, nil
}

func (s *shared) load(slot int) int64 { return atomic.LoadInt64(&s.slots[slot]) }

// take adds n to slot and returns its value before.
func (s *shared) take(slot int, n int64) int64 { return atomic.AddInt64(&s.slots[slot], n) - n }

// tick drives the logical clock forward by us microseconds and returns
// the new time.
func (s *shared) tick(us int64) time.Time {
	return t0.Add(time.Duration(atomic.AddInt64(&s.slots[slotClock], us)) * time.Microsecond)
}

// now reads the logical clock.
func (s *shared) now() time.Time {
	return t0.Add(time.Duration(s.load(slotClock)) * time.Microsecond)
}

// progress counts the calls of a run's goroutine workers, so that faults
// are injected at points of progress rather than of wall time.
type progress struct {
	calls    atomic.Int64
	consumed atomic.Int64 // items processed or delivered
	every    int64        // calls between two ticks; 0: no ticks
	tick     chan struct{}
	crashAt  int64 // consumed count at which crash is closed; 0: never
	crash    chan struct{}
}

func (p *progress) observe(c *call) {
	if n := p.calls.Add(1); p.every > 0 && n%p.every == 0 {
		select {
		case p.tick <- struct{}{}:
		default:
		}
	}
	if c.Status == statusOK && (c.Fn == fnProcess || c.Fn == fnDeliver) {
		if p.consumed.Add(1) == p.crashAt {
			close(p.crash)
		}
	}
}
