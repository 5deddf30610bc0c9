package memstore_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// This file checks the memstore outbox against a small reference model of
// the claim-store contract (ledger.ClaimStore's godoc and DESIGN.md), the
// way model_rapid_test.go does for deliveries: the model never calls the
// transition functions of ledger.OutboxEntry. It uses OutboxEntryIDFor,
// which names entries and decides nothing.

var cmdlKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

// cmdlRecord is what the model tracks of an entry; the store's answers are
// turned into the same shape (cviewOf).
type cmdlRecord struct {
	ID               ledger.OutboxEntryID
	Envelope         ledger.Envelope
	Status           ledger.OutboxStatus
	Attempts         int
	NextAttemptAt    time.Time // RetryScheduled and Deferred only
	LastError        *ledger.EmissionError
	Result           *ledger.EmissionResult
	DeadLetterReason string
	ClaimSeq         int64
	Claim            *ledger.Claim
	Ended            *mdlEnded
	Version          int64
	Created, Updated time.Time
	EndedAt          time.Time
}

func cviewOf(e ledger.OutboxEntry) cmdlRecord {
	v := cmdlRecord{
		ID: e.ID, Envelope: e.Envelope, Status: e.Status, Attempts: e.Attempts, NextAttemptAt: e.NextAttemptAt,
		LastError: e.LastError, Result: e.Result, DeadLetterReason: e.DeadLetterReason, ClaimSeq: e.ClaimSeq,
		Claim: e.Claim, Version: e.Version, Created: e.CreatedAt, Updated: e.UpdatedAt, EndedAt: e.EndedAt,
	}
	if len(v.Envelope.Payload) == 0 {
		v.Envelope.Payload = nil
	}
	if e.EndedClaim != nil {
		v.Ended = &mdlEnded{Token: e.EndedClaim.Token, Seq: e.EndedClaim.Seq, Op: e.EndedClaim.Op}
	}
	return v
}

func (r *cmdlRecord) terminal() bool {
	return r.Status == ledger.OutboxStatusDelivered || r.Status == ledger.OutboxStatusFailed || r.Status == ledger.OutboxStatusDeadLettered
}

func (r *cmdlRecord) scheduled() bool {
	return r.Status == ledger.OutboxStatusRetryScheduled || r.Status == ledger.OutboxStatusDeferred
}

// write lands a new status (and its data) at now: a terminal status drops
// the claim and any remembered one; an open one ends the claim in force
// under op, so that the same call repeated under it answers Repeated.
func (r *cmdlRecord) write(status ledger.OutboxStatus, next time.Time, op ledger.Operation, now time.Time) {
	r.Status, r.NextAttemptAt = status, time.Time{}
	if r.scheduled() {
		r.NextAttemptAt = next
	}
	switch {
	case r.terminal():
		r.Claim, r.Ended, r.EndedAt = nil, nil, now
	case r.Claim != nil:
		r.Ended = &mdlEnded{Token: r.Claim.Token, Seq: r.Claim.Seq, Op: op}
		r.Claim = nil
	}
	r.Version++
	r.Updated = now
}

// claimModel is the rapid state machine for the outbox.
type claimModel struct {
	ctx    context.Context
	o      ledger.ClaimStore
	now    time.Time // also the store's clock, for the methods without now
	recs   map[ledger.OutboxEntryID]*cmdlRecord
	claims []ledger.Claim
	// seq is each entry's enqueue order: pending entries created at the
	// same instant come out in the order they were enqueued.
	seq map[ledger.OutboxEntryID]int
}

// pendingCompare orders pending entries: CreatedAt, then enqueue order.
func (s *claimModel) pendingCompare(a, b *cmdlRecord) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return s.seq[a.ID] - s.seq[b.ID]
}

func (s *claimModel) actions() map[string]func(*rapid.T) {
	acts := map[string]func(*rapid.T){"": s.check}
	for name, a := range map[string]struct {
		fn     func(*rapid.T)
		weight int
	}{
		"Enqueue": {s.enqueue, 2}, "ClaimPending": {s.claim, 3}, "ClaimRetryReady": {s.claimRetry, 2},
		"Complete": {s.complete, 4}, "BaseCompletion": {s.base, 1}, "Save": {s.save, 1}, "Tick": {s.tick, 2},
	} {
		for i := range a.weight {
			acts[name+strings.Repeat("'", i)] = a.fn
		}
	}
	return acts
}

func (s *claimModel) enqueue(t *rapid.T) {
	key := rapid.SampledFrom(cmdlKeys).Draw(t, "key")
	env := ledger.Envelope{
		Provider: rapid.SampledFrom([]string{"mail", "sms"}).Draw(t, "provider"), Kind: "welcome", IdempotencyKey: key,
	}
	if p := rapid.SampledFrom(mdlPayloads).Draw(t, "payload"); p != "" {
		env.Payload = []byte(p)
	}
	id := ledger.OutboxEntryIDFor(key)
	r := s.recs[id]
	if r != nil && rapid.Bool().Draw(t, "sameEnvelope") {
		env = r.Envelope
	}
	res, err := s.o.Enqueue(s.ctx, env)
	require.NoError(t, err)
	switch {
	case r == nil:
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		r = &cmdlRecord{ID: id, Envelope: env, Status: ledger.OutboxStatusPending, Version: 1, Created: s.now, Updated: s.now}
		s.recs[id] = r
		s.seq[id] = len(s.seq) + 1
	case reflect.DeepEqual(env, r.Envelope):
		require.Equal(t, ledger.OutcomeRepeated, res.Outcome)
	default:
		require.Equal(t, ledger.OutcomeConflict, res.Outcome)
	}
	s.same(t, r, res.Entry)
}

func (s *claimModel) claim(t *rapid.T)      { s.claimFrom(t, false) }
func (s *claimModel) claimRetry(t *rapid.T) { s.claimFrom(t, true) }

// claimFrom claims Pending entries (or, for retry, scheduled entries that
// are due) that are unclaimed or whose claim expired, in delivery order.
func (s *claimModel) claimFrom(t *rapid.T, retry bool) {
	req := ledger.ClaimRequest{
		Worker: rapid.SampledFrom([]string{"w1", "w2"}).Draw(t, "worker"), Now: s.now,
		LeaseDuration: rapid.SampledFrom(mdlDurations).Draw(t, "duration"), Limit: rapid.IntRange(1, 3).Draw(t, "limit"),
	}
	var cands []*cmdlRecord
	for _, r := range s.recs {
		free := r.Claim == nil || !s.now.Before(r.Claim.ExpiresAt)
		if free && ((!retry && r.Status == ledger.OutboxStatusPending) || (retry && r.scheduled() && !r.NextAttemptAt.After(s.now))) {
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b *cmdlRecord) int {
		if !retry {
			return s.pendingCompare(a, b)
		}
		if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
			return c
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	cands = cands[:min(req.Limit, len(cands))]
	claimFn := s.o.ClaimPending
	if retry {
		claimFn = s.o.ClaimRetryReady
	}
	got, err := claimFn(s.ctx, req)
	require.NoError(t, err)
	require.Len(t, got, len(cands))
	for i, r := range cands {
		c := got[i].Claim
		want := ledger.Claim{EntryID: r.ID, Worker: req.Worker, Token: c.Token, Seq: r.ClaimSeq + 1, ClaimedAt: s.now, ExpiresAt: s.now.Add(req.LeaseDuration)}
		require.Equal(t, want, c, "claim %d", i)
		require.NotEmpty(t, c.Token)
		s.claims = append(s.claims, c)
		r.Claim, r.Ended, r.ClaimSeq = &want, nil, r.ClaimSeq+1
		r.Attempts++
		r.Version++
		r.Updated = s.now
		s.same(t, r, got[i].Entry)
	}
}

// complete makes one claim completion, with a claim in force, one whose
// claim just ended, or any earlier one, sometimes forged; often repeated.
func (s *claimModel) complete(t *rapid.T) {
	var current, justEnded []ledger.Claim
	for _, c := range s.claims {
		r := s.recs[c.EntryID]
		if r.Claim != nil && r.Claim.Token == c.Token {
			current = append(current, c)
		} else if r.Ended != nil && r.Ended.Token == c.Token {
			justEnded = append(justEnded, c)
		}
	}
	pool := s.claims
	switch k := rapid.IntRange(0, 5).Draw(t, "pool"); {
	case k < 3 && len(current) > 0:
		pool = current
	case k < 5 && len(justEnded) > 0:
		pool = justEnded
	}
	if len(pool) == 0 {
		t.Skip("nothing claimed yet")
	}
	c := rapid.SampledFrom(pool).Draw(t, "claim")
	if rapid.IntRange(0, 7).Draw(t, "forge") == 0 {
		c.Token = "forged-" + c.Token
	}
	kind := rapid.SampledFrom([]string{"delivered", "retry", "failed", "deadLettered", "release", "defer"}).Draw(t, "kind")
	next := s.now.Add(time.Duration(rapid.IntRange(-5, 5).Draw(t, "nextSeconds")) * time.Second)
	emissionErr := ledger.EmissionError{Code: "E1", Message: "boom"}
	repeatedly(t, func() {
		r := s.recs[c.EntryID]
		op := map[string]ledger.Operation{
			"delivered": ledger.OpMarkDelivered, "retry": ledger.OpMarkFailed, "failed": ledger.OpMarkFailed,
			"deadLettered": ledger.OpMarkDeadLettered, "release": ledger.OpReleaseClaim, "defer": ledger.OpSaveClaim,
		}[kind]
		// Precedence: Ended, LeaseLost, Repeated; no expiry check.
		var want ledger.Outcome
		switch {
		case r.terminal():
			want = ledger.OutcomeEnded
		case r.Claim == nil || r.Claim.Token != c.Token || r.Claim.Seq != c.Seq:
			want = ledger.OutcomeLeaseLost
			if r.Ended != nil && *r.Ended == (mdlEnded{Token: c.Token, Seq: c.Seq, Op: op}) {
				want = ledger.OutcomeRepeated
			}
		default:
			want = ledger.OutcomeApplied
		}
		var res ledger.OutboxResult
		var err error
		switch kind {
		case "delivered":
			res, err = s.o.MarkClaimDelivered(s.ctx, c, ledger.EmissionResult{ProviderRef: "ref"})
			if want == ledger.OutcomeApplied {
				r.Result = &ledger.EmissionResult{ProviderRef: "ref"}
				r.write(ledger.OutboxStatusDelivered, time.Time{}, op, s.now)
			}
		case "retry", "failed":
			var nextRetry *time.Time
			status := ledger.OutboxStatusFailed
			if kind == "retry" {
				nextRetry, status = &next, ledger.OutboxStatusRetryScheduled
			}
			res, err = s.o.MarkClaimFailed(s.ctx, c, emissionErr, nextRetry)
			if want == ledger.OutcomeApplied {
				r.LastError = &emissionErr
				r.write(status, next, op, s.now)
			}
		case "deadLettered":
			res, err = s.o.MarkClaimDeadLettered(s.ctx, c, emissionErr, "gone")
			if want == ledger.OutcomeApplied {
				r.LastError, r.DeadLetterReason = &emissionErr, "gone"
				r.write(ledger.OutboxStatusDeadLettered, time.Time{}, op, s.now)
			}
		case "release":
			res, err = s.o.ReleaseClaim(s.ctx, c, "not now")
			if want == ledger.OutcomeApplied {
				r.Attempts-- // the attempt is given back; the status stays
				r.write(r.Status, r.NextAttemptAt, op, s.now)
			}
		default:
			res, err = s.o.SaveClaim(s.ctx, c, ledger.OutboxEntry{ID: c.EntryID, Status: ledger.OutboxStatusDeferred, NextAttemptAt: next, Attempts: 99})
			if want == ledger.OutcomeApplied { // every mutable field but Attempts
				r.LastError, r.Result, r.DeadLetterReason = nil, nil, ""
				r.write(ledger.OutboxStatusDeferred, next, op, s.now)
			}
		}
		require.NoError(t, err)
		require.Equal(t, want, res.Outcome, "%s", kind)
		s.same(t, r, res.Entry)
	})
}

// base makes a base-contract completion, which ignores claims: it ends the
// claim in force (so that the holder's own completion is not taken for a
// repeat), counts an attempt when no claim had, and on an ended entry
// answers it unchanged when it ended the same way, else ErrConflict.
func (s *claimModel) base(t *rapid.T) {
	id := ledger.OutboxEntryIDFor(rapid.SampledFrom(cmdlKeys).Draw(t, "key"))
	r := s.recs[id]
	kind := rapid.SampledFrom([]ledger.OutboxStatus{ledger.OutboxStatusDelivered, ledger.OutboxStatusFailed, ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusDeadLettered}).Draw(t, "kind")
	next := s.now.Add(time.Duration(rapid.IntRange(-5, 5).Draw(t, "nextSeconds")) * time.Second)
	emissionErr := ledger.EmissionError{Message: "base"}
	var got ledger.OutboxEntry
	var err error
	switch kind {
	case ledger.OutboxStatusDelivered:
		got, err = s.o.MarkDelivered(s.ctx, id, ledger.EmissionResult{Detail: "base"})
	case ledger.OutboxStatusDeadLettered:
		got, err = s.o.MarkDeadLettered(s.ctx, id, emissionErr, "base")
	case ledger.OutboxStatusFailed:
		got, err = s.o.MarkFailed(s.ctx, id, emissionErr, nil)
	default:
		got, err = s.o.MarkFailed(s.ctx, id, emissionErr, &next)
	}
	switch {
	case r == nil:
		require.ErrorIs(t, err, ledger.ErrNotFound)
	case r.terminal() && r.Status == kind:
		require.NoError(t, err)
		s.same(t, r, got)
	case r.terminal():
		require.ErrorIs(t, err, ledger.ErrConflict)
	default:
		require.NoError(t, err)
		if r.Claim == nil {
			r.Attempts++
		}
		switch kind {
		case ledger.OutboxStatusDelivered:
			r.Result = &ledger.EmissionResult{Detail: "base"}
		case ledger.OutboxStatusDeadLettered:
			r.LastError, r.DeadLetterReason = &emissionErr, "base"
		default:
			r.LastError = &emissionErr
		}
		r.write(kind, next, "", s.now)
		r.Ended = nil
		s.same(t, r, got)
	}
}

// save makes an optimistic Save with the stored Version or a stale one.
func (s *claimModel) save(t *rapid.T) {
	id := ledger.OutboxEntryIDFor(rapid.SampledFrom(cmdlKeys).Draw(t, "key"))
	r := s.recs[id]
	in := ledger.OutboxEntry{ID: id, Status: ledger.OutboxStatusDeferred, NextAttemptAt: s.now.Add(time.Second), Attempts: rapid.IntRange(0, 3).Draw(t, "attempts"), Version: 1}
	if r != nil {
		in.Version = max(1, r.Version-int64(rapid.IntRange(0, 1).Draw(t, "stale")))
	}
	got, err := s.o.Save(s.ctx, in)
	switch {
	case r == nil:
		require.ErrorIs(t, err, ledger.ErrNotFound)
	case in.Version != r.Version || r.terminal():
		require.ErrorIs(t, err, ledger.ErrConflict)
	default:
		require.NoError(t, err)
		r.Attempts, r.LastError, r.Result, r.DeadLetterReason = in.Attempts, nil, nil, ""
		r.write(in.Status, in.NextAttemptAt, ledger.OpSave, s.now)
		s.same(t, r, got)
	}
}

func (s *claimModel) tick(t *rapid.T) {
	s.now = s.now.Add(rapid.SampledFrom([]time.Duration{time.Microsecond, time.Second, 6 * time.Second, 31 * time.Second}).Draw(t, "step"))
}

// check compares every entry, and what the finders return, with the model.
func (s *claimModel) check(t *rapid.T) {
	var pending, ready []*cmdlRecord
	for _, key := range cmdlKeys {
		id := ledger.OutboxEntryIDFor(key)
		got, err := s.o.FindByID(s.ctx, id)
		r := s.recs[id]
		if r == nil {
			require.ErrorIs(t, err, ledger.ErrNotFound)
			continue
		}
		require.NoError(t, err)
		s.same(t, r, got)
		if r.Status == ledger.OutboxStatusPending {
			pending = append(pending, r)
		} else if r.scheduled() && !r.NextAttemptAt.After(s.now) {
			ready = append(ready, r)
		}
	}
	order := func(rs []*cmdlRecord, at func(*cmdlRecord) time.Time) []ledger.OutboxEntryID {
		slices.SortFunc(rs, func(a, b *cmdlRecord) int {
			if c := at(a).Compare(at(b)); c != 0 {
				return c
			}
			return strings.Compare(string(a.ID), string(b.ID))
		})
		var ids []ledger.OutboxEntryID
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	ids := func(es []ledger.OutboxEntry) []ledger.OutboxEntryID {
		var out []ledger.OutboxEntryID
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	gotPending, err := s.o.FindPending(s.ctx, ledger.MaxLimit)
	require.NoError(t, err)
	slices.SortFunc(pending, s.pendingCompare)
	var wantPending []ledger.OutboxEntryID
	for _, r := range pending {
		wantPending = append(wantPending, r.ID)
	}
	require.Equal(t, wantPending, ids(gotPending))
	gotReady, err := s.o.FindRetryReady(s.ctx, s.now, ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, order(ready, func(r *cmdlRecord) time.Time { return r.NextAttemptAt }), ids(gotReady))
}

// same compares the model's record with the store's. The store hands
// out no tokens (ledger.OutboxEntry.Redacted), so the model's are left
// out of the comparison, and the store's must be empty.
func (s *claimModel) same(t *rapid.T, r *cmdlRecord, e ledger.OutboxEntry) {
	if want, got := r.redacted(), cviewOf(e); !reflect.DeepEqual(want, got) {
		require.Equal(t, want, got, "entry %s", r.ID)
	}
}

// redacted returns r as a store hands it out: without tokens.
func (r cmdlRecord) redacted() cmdlRecord {
	if r.Claim != nil {
		c := *r.Claim
		c.Token = ""
		r.Claim = &c
	}
	if r.Ended != nil {
		e := *r.Ended
		e.Token = ""
		r.Ended = &e
	}
	return r
}

// runClaimModel runs the state machine against the store newStore makes,
// fresh for every rapid check, stamping from the given clock.
func runClaimModel(t *testing.T, newStore func(clock func() time.Time) ledger.ClaimStore) {
	rapid.Check(t, func(t *rapid.T) {
		s := &claimModel{ctx: context.Background(), now: mdlT0, recs: map[ledger.OutboxEntryID]*cmdlRecord{}, seq: map[ledger.OutboxEntryID]int{}}
		s.o = newStore(func() time.Time { return s.now })
		for range rapid.IntRange(1, 4).Draw(t, "initial") {
			s.enqueue(t)
		}
		for range 2 {
			t.Repeat(s.actions())
		}
	})
}

// TestClaimModel checks the memstore outbox against the reference model.
func TestClaimModel(t *testing.T) {
	t.Parallel()
	runClaimModel(t, func(clock func() time.Time) ledger.ClaimStore { return memstore.NewOutbox(memstore.WithClock(clock)) })
}
