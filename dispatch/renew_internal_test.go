package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"
)

// manualTimers is an AfterFunc whose timers fire when the test says.
type manualTimers struct {
	mu     sync.Mutex
	armed  []func()
	active []bool
}

func (m *manualTimers) after(_ time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := len(m.armed)
	m.armed, m.active = append(m.armed, f), append(m.active, true)
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		was := m.active[i]
		m.active[i] = false
		return was
	}
}

// fire runs the active timers and returns how many it ran.
func (m *manualTimers) fire() int {
	m.mu.Lock()
	var due []func()
	for i, f := range m.armed {
		if m.active[i] {
			m.active[i] = false
			due = append(due, f)
		}
	}
	m.mu.Unlock()
	for _, f := range due {
		f()
	}
	return len(due)
}

func (m *manualTimers) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, a := range m.active {
		if a {
			n++
		}
	}
	return n
}

// countingRenewer counts its renewals and answers keep.
type countingRenewer struct {
	renewal
	calls int
	keep  bool
}

func (r *countingRenewer) renew(context.Context) func() bool {
	r.calls++
	return func() bool { return r.keep }
}

// TestRenewalsArmOneTimerWhileWorkIsInFlight: work that joins arms the
// cycle's one timer; a tick renews every work still in flight and arms
// the next while any is; a tick that finds none arms nothing until work
// joins again; work whose renewal reports false is renewed no more; close
// stops the timer for good.
func TestRenewalsArmOneTimerWhileWorkIsInFlight(t *testing.T) {
	t.Parallel()
	timers := &manualTimers{}
	rs := newRenewals(context.Background(), timers.after, time.Second)
	a, b := &countingRenewer{keep: true}, &countingRenewer{keep: true}
	rs.join(&a.renewal, a)
	rs.join(&b.renewal, b)
	if n := timers.pending(); n != 1 {
		t.Fatalf("%d timers armed for two works in flight: want one", n)
	}
	timers.fire()
	if a.calls != 1 || b.calls != 1 {
		t.Fatalf("renewals %d and %d after a tick: want one each", a.calls, b.calls)
	}
	rs.leave(&a.renewal)
	timers.fire()
	if a.calls != 1 || b.calls != 2 {
		t.Fatalf("renewals %d and %d: want work that left renewed no more", a.calls, b.calls)
	}
	rs.leave(&b.renewal)
	if timers.fire() != 1 || timers.pending() != 0 {
		t.Fatal("a tick that finds no work must arm no next one")
	}
	lost := &countingRenewer{keep: false}
	rs.join(&lost.renewal, lost)
	if timers.pending() != 1 {
		t.Fatal("work that joins must arm the timer again")
	}
	timers.fire()
	timers.fire()
	if lost.calls != 1 {
		t.Fatalf("%d renewals of a lost claim: want one", lost.calls)
	}
	c := &countingRenewer{keep: true}
	rs.join(&c.renewal, c)
	rs.close()
	if timers.pending() != 0 {
		t.Fatal("close must stop the timer")
	}
	rs.join(&c.renewal, c)
	if timers.pending() != 0 || timers.fire() != 0 || c.calls != 0 {
		t.Fatal("nothing joins or ticks after close")
	}
}
