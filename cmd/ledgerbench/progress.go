package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progressEvery is how often a running phase reports.
const progressEvery = time.Second

// progress writes the progress line to stderr: on a terminal one line
// overwritten in place, elsewhere (a log file, a CI console) one line per
// second. Writes are serialised because phases report from their own
// goroutine while the run logs from its.
type progress struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
}

// newProgress writes to w, in place when w is a terminal.
func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{w: w, tty: tty}
}

// logf writes one line that stays.
func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// line writes a progress line: in place on a terminal, final or not.
func (p *progress) line(s string, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", s)
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\x1b[K", s)
	default:
		fmt.Fprintln(p.w, s)
	}
}

// phase is one step of a workload whose progress is counted (items
// enqueued, completed, rows loaded). total is 0 when open-ended.
type phase struct {
	p     *progress
	label string
	total int64
	start time.Time
	done  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

// begin starts reporting a phase every second until end.
func (p *progress) begin(label string, total int) *phase {
	ph := &phase{p: p, label: label, total: int64(total), start: time.Now(), stop: make(chan struct{})}
	ph.wg.Add(1)
	go func() {
		defer ph.wg.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-ph.stop:
				return
			case <-t.C:
				p.line(ph.status(), false)
			}
		}
	}()
	return ph
}

// add counts n more units done.
func (ph *phase) add(n int) { ph.done.Add(int64(n)) }

// end stops the reports and writes the phase's last line.
func (ph *phase) end() {
	close(ph.stop)
	ph.wg.Wait()
	ph.p.line(ph.status(), true)
}

func (ph *phase) status() string {
	elapsed := time.Since(ph.start)
	done := ph.done.Load()
	rate := float64(done) / max(elapsed.Seconds(), 1e-9)
	if ph.total > 0 {
		return fmt.Sprintf("%s: %d/%d (%.0f%%), %.0f/s, %s", ph.label, done, ph.total,
			100*float64(done)/float64(ph.total), rate, elapsed.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s: %d, %.0f/s, %s", ph.label, done, rate, elapsed.Round(100*time.Millisecond))
}
