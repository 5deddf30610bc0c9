package main

import (
	"fmt"
	"sync"
	"time"
)

// progress tells the operator on stderr that a command working in batches
// (purge, redrive by filter) is still going: a line once the command has
// run for a second, then at most one a second. A command that ends sooner
// prints none, and stdout, where the result and any JSON go, never sees
// them.
type progress struct {
	e           env
	what        string
	start, last time.Time
}

// progressEvery is how long a command runs before its first progress
// line, and the least time between two.
const progressEvery = time.Second

// progress starts the progress of the command that does what.
func (e env) progress(what string) *progress {
	return &progress{e: e, what: what, start: e.clock()}
}

// report prints the progress so far, described by format and args, when a
// line is due.
func (p *progress) report(format string, args ...any) {
	now := p.e.clock()
	if now.Sub(p.start) < progressEvery || (!p.last.IsZero() && now.Sub(p.last) < progressEvery) {
		return
	}
	p.last = now
	fmt.Fprintf(p.e.stderr, "ledgerctl: %s: %s after %s\n", p.what, fmt.Sprintf(format, args...), now.Sub(p.start).Round(100*time.Millisecond))
}

// ticker is env.tick on the wall clock.
func ticker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// during prints progress lines about what, paced by e.tick, until the
// returned function is called: for a command whose work is one library
// call that commits in batches of its own (expire's sweep) and says
// nothing until it returns. The lines follow report's rule, so a call
// that ends within a second prints none; the returned function waits for
// the last line, so nothing is printed after it returns.
func (e env) during(what string) (stop func()) {
	if e.tick == nil {
		return func() {}
	}
	p := e.progress(what)
	ticks, stopTicks := e.tick(progressEvery)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-ticks:
				p.report("still running")
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		stopTicks()
	}
}
