package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is the history the checker reads: one entry per call, as a
// worker saw it, appended in memory by goroutines and to a file by the
// child process.

// status is what the caller knows about a call, in Jepsen's terms.
type status string

const (
	// statusInvoke: the call started; only the child's file holds these,
	// so that a call cut short by SIGKILL is still known to have started.
	statusInvoke status = "invoke"
	// statusOK: the call returned without error and, for a transition,
	// answered OutcomeApplied.
	statusOK status = "ok"
	// statusFail: the call certainly changed nothing: it answered an
	// outcome other than Applied, or failed before anything reached the
	// server.
	statusFail status = "fail"
	// statusInfo: the call failed in a way that may or may not have
	// committed. The checker counts it as "may have happened".
	statusInfo status = "info"
)

// fn names the operation of a call. With kind it says which store method
// was called.
type fn string

const (
	fnEnqueue    fn = "enqueue"     // EnqueueBatch of either store
	fnGrant      fn = "grant"       // Lease; ClaimPending or ClaimRetryReady
	fnAck        fn = "ack"         // Acknowledge
	fnProcess    fn = "process"     // MarkProcessed
	fnFail       fn = "fail"        // MarkFailed; MarkClaimFailed
	fnRelease    fn = "release"     // Release; ReleaseClaim
	fnExpire     fn = "expire"      // Expire
	fnDeliver    fn = "deliver"     // MarkClaimDelivered
	fnDeadLetter fn = "dead_letter" // MarkClaimDeadLettered
)

// kind says which contract an item or a call belongs to.
type kind string

const (
	kindDelivery kind = "delivery"
	kindEntry    kind = "entry"
)

// grant is one lease or claim, reduced to what the checker needs.
type grant struct {
	ID    string       `json:"id"`
	Seq   int64        `json:"seq"`
	Token ledger.Token `json:"token"`
	// Owner holds a delivery lease; for a claim only Agent is set, to the
	// claiming worker.
	Owner   ledger.Owner `json:"owner"`
	At      time.Time    `json:"at"`
	Expires time.Time    `json:"expires"`
	// Version is the record's version right after the grant.
	Version int64 `json:"version,omitempty"`
}

// holder names who held g: a delivery owner, or a claim worker.
func (g grant) holder() string {
	if g.Owner.Incarnation == "" {
		return g.Owner.Agent
	}
	return g.Owner.String()
}

func grantOfLease(l ledger.Lease, version int64) grant {
	return grant{ID: string(l.DeliveryID), Seq: l.Seq, Token: l.Token, Owner: l.Owner, At: l.GrantedAt, Expires: l.ExpiresAt, Version: version}
}

func grantOfClaim(c ledger.Claim, version int64) grant {
	return grant{ID: string(c.EntryID), Seq: c.Seq, Token: c.Token, Owner: ledger.Owner{Agent: c.Worker}, At: c.ClaimedAt, Expires: c.ExpiresAt, Version: version}
}

// call is one entry of the history.
type call struct {
	Proc   string `json:"proc"` // the worker (goroutine or process incarnation)
	N      int64  `json:"n"`    // the call's number within Proc
	Status status `json:"status"`
	Fn     fn     `json:"fn"`
	Kind   kind   `json:"kind"`
	// Owner is the caller: a delivery owner, or the claim worker as Agent.
	Owner ledger.Owner `json:"owner,omitzero"`
	// Now is the logical time passed in (zero for claim completions,
	// which carry none).
	Now time.Time `json:"now,omitzero"`
	// Invoked and Returned are wall-clock Unix nanoseconds, comparable
	// across the processes of one machine, for real-time order.
	Invoked  int64 `json:"invoked"`
	Returned int64 `json:"returned,omitempty"`

	// Arguments.
	IDs    []string `json:"ids,omitempty"`    // enqueue: the items, in order
	Under  *grant   `json:"under,omitempty"`  // the lease or claim a call is made under
	Item   string   `json:"item,omitempty"`   // MarkProcessed: the delivery
	Target string   `json:"target,omitempty"` // MarkProcessed: the delivery's target
	Fence  *int64   `json:"fence,omitempty"`
	Action string   `json:"action,omitempty"` // MarkProcessed action; claim completion reference
	// Permanent: MarkFailed for good, or MarkClaimFailed without a retry.
	Permanent bool `json:"permanent,omitempty"`

	// Results.
	Outcome  ledger.Outcome   `json:"outcome,omitempty"`
	Outcomes []ledger.Outcome `json:"outcomes,omitempty"` // enqueue: one per ID
	// Version is the version of the record a transition returned.
	Version int64 `json:"version,omitempty"`
	// EndAt is, for an applied call that ended a grant, when the record
	// says it ended.
	EndAt     time.Time `json:"end_at,omitzero"`
	Grants    []grant   `json:"grants,omitempty"`
	Reclaimed []string  `json:"reclaimed,omitempty"`
	// Changed lists what Expire changed; kept on an error too, since a
	// sweep that fails keeps the batches it committed.
	Changed []string `json:"changed,omitempty"`
	Err     string   `json:"err,omitempty"`
}

// sink receives a worker's calls.
type sink interface {
	// invoke is told that c is about to be made.
	invoke(c *call) error
	// complete is told how c ended.
	complete(c *call) error
}

// memorySink keeps the calls of goroutine workers. A goroutine cannot die
// mid-call without the test, so only completed calls are kept.
type memorySink struct {
	mu    sync.Mutex
	calls []call
}

func (*memorySink) invoke(*call) error { return nil }

func (s *memorySink) complete(c *call) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, *c)
	return nil
}

func (s *memorySink) history() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// fileSink appends a process's calls to a file, one JSON line each, synced
// before the call is made and after it returned, so that whatever kills
// the process, the file says which calls started and which ended.
type fileSink struct {
	f *os.File
}

func newFileSink(path string) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &fileSink{f: f}, nil
}

func (s *fileSink) invoke(c *call) error { return s.write(c) }

func (s *fileSink) complete(c *call) error { return s.write(c) }

func (s *fileSink) write(c *call) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	// One write per line: a kill can tear at most the last line.
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return s.f.Sync()
}

func (s *fileSink) Close() error { return s.f.Close() }

// readCallLog reads a file written by fileSink and merges each call's
// invoke and completion lines. A call that started but never ended (the
// process was killed) becomes statusInfo, returned at killedAt (wall-clock
// nanoseconds; 0 for unknown, taken as "never"). A torn last line is
// dropped: its call had not been made yet, or its invoke line is complete.
func readCallLog(path string, killedAt int64) ([]call, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type key struct {
		proc string
		n    int64
	}
	var order []key
	byKey := map[key]call{}
	lines := bytes.Split(data, []byte("\n"))
	// The last piece is empty when the file ends with a newline, and a
	// torn line otherwise: either way it is no call.
	for i, line := range lines[:len(lines)-1] {
		var c call
		if err := json.Unmarshal(line, &c); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		k := key{c.Proc, c.N}
		prev, seen := byKey[k]
		if !seen {
			order = append(order, k)
		}
		if seen && prev.Status != statusInvoke {
			continue // a completion is never overwritten
		}
		byKey[k] = c
	}
	if killedAt == 0 {
		killedAt = math.MaxInt64
	}
	out := make([]call, 0, len(order))
	for _, k := range order {
		c := byKey[k]
		if c.Status == statusInvoke {
			c.Status, c.Returned, c.Err = statusInfo, killedAt, "process killed during the call"
		}
		out = append(out, c)
	}
	return out, nil
}

// explain logs the history and record of a few items a violation names,
// which is what one needs to tell a store bug from a checker bug.
func explain(t *testing.T, calls []call, final finalState, rep *report) {
	named := regexp.MustCompile(`(delivery|entry) ([^ :]+):`)
	shown := map[string]bool{}
	for _, inv := range invariants() {
		for _, v := range rep.violations[inv] {
			m := named.FindStringSubmatch(v)
			if m == nil || shown[m[2]] || len(shown) == 3 {
				continue
			}
			id := m[2]
			shown[id] = true
			var lines []string
			for _, c := range calls {
				if mentions(&c, id) {
					b, _ := json.Marshal(c)
					lines = append(lines, string(b))
				}
			}
			rec, _ := json.Marshal(final.deliveries[id])
			if e, ok := final.entries[id]; ok {
				rec, _ = json.Marshal(e)
			}
			t.Logf("history of %s %s (%d calls):\n%s\nfinal record: %s", m[1], id, len(lines), strings.Join(lines, "\n"), rec)
		}
	}
}

// mentions reports whether c is about the item id.
func mentions(c *call, id string) bool {
	if c.Item == id || (c.Under != nil && c.Under.ID == id) {
		return true
	}
	for _, list := range [][]string{c.IDs, c.Reclaimed, c.Changed} {
		if slices.Contains(list, id) {
			return true
		}
	}
	for _, g := range c.Grants {
		if g.ID == id {
			return true
		}
	}
	return false
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
