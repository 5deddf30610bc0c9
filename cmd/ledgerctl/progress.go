package main

import (
	"fmt"
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
