package pgstore_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// The outbox half of the generator of TestRandomSequencesMatchMemstore
// (the drawing machinery is in differential_random_gen_test.go).

// envelope draws an envelope: mostly the usual one of its key, sometimes
// the same content spelled otherwise, sometimes other content.
func (r *diffRun) envelope() ledger.Envelope {
	env := r.envs[pickOne(r, diffKeys)]
	switch r.rng.IntN(10) {
	case 0:
		env.Payload = []byte("other body")
	case 1:
		env.Kind = "other-kind"
	case 2:
		if env.Payload == nil {
			env.Payload = []byte{}
		}
	}
	return env
}

func descEnv(env ledger.Envelope) string {
	payload := fmt.Sprintf("%q", env.Payload)
	if env.Payload == nil {
		payload = "nil"
	}
	return fmt.Sprintf("%s{%s/%s payload=%s}", env.IdempotencyKey, env.Provider, env.Kind, payload)
}

// The calls below without a now are stamped by the stores' clock option,
// which reads the logical clock of the step.

func (r *diffRun) opOutboxEnqueue() diffOp {
	env := r.envelope()
	return diffOp{"Outbox.Enqueue", "Outbox.Enqueue " + descEnv(env), writesEntries, []string{env.IdempotencyKey},
		func(s *diffSide) (any, error) { return s.o.Enqueue(r.ctx, cloneEnvs(env)[0]) }}
}

func (r *diffRun) opOutboxEnqueueBatch() diffOp {
	envs := make([]ledger.Envelope, 1+r.rng.IntN(4))
	for i := range envs {
		envs[i] = r.envelope()
	}
	if r.chance(6) {
		envs[r.rng.IntN(len(envs))].Provider = "" // the whole batch is ErrInvalid
	}
	descs, keys := make([]string, len(envs)), make([]string, len(envs))
	for i := range envs {
		descs[i], keys[i] = descEnv(envs[i]), envs[i].IdempotencyKey
	}
	return diffOp{"Outbox.EnqueueBatch", fmt.Sprintf("Outbox.EnqueueBatch %v", descs), writesEntries, keys,
		func(s *diffSide) (any, error) { return s.ob.EnqueueBatch(r.ctx, cloneEnvs(envs...)) }}
}

// entryEdit is what Save and SaveClaim write over an entry.
type entryEdit struct {
	status   ledger.OutboxStatus
	next     time.Time
	attempts int // -1 keeps the entry's
	lastErr  *ledger.EmissionError
	result   *ledger.EmissionResult
	reason   string
}

func (ed entryEdit) apply(e *ledger.OutboxEntry) {
	e.Status, e.NextAttemptAt, e.DeadLetterReason = ed.status, ed.next, ed.reason
	if ed.attempts >= 0 {
		e.Attempts = ed.attempts
	}
	e.LastError, e.Result = nil, nil
	if ed.lastErr != nil {
		v := *ed.lastErr
		e.LastError = &v
	}
	if ed.result != nil {
		v := *ed.result
		e.Result = &v
	}
}

func (ed entryEdit) String() string {
	attempts := "kept"
	if ed.attempts >= 0 {
		attempts = fmt.Sprint(ed.attempts)
	}
	return fmt.Sprintf("{%s next=%s attempts=%s error=%+v result=%+v reason=%q}",
		ed.status, atT0(ed.next), attempts, ed.lastErr, ed.result, ed.reason)
}

// drawEdit draws an edit, mostly a deferral or a retry; a scheduled one
// without a time is ErrInvalid.
func (r *diffRun) drawEdit() entryEdit {
	ed := entryEdit{attempts: -1}
	switch x := r.rng.IntN(100); {
	case x < 40:
		ed.status = ledger.OutboxStatusDeferred
	case x < 60:
		ed.status = ledger.OutboxStatusRetryScheduled
	case x < 75:
		ed.status = ledger.OutboxStatusPending
	case x < 85:
		ed.status = ledger.OutboxStatusDelivered
		ed.result = &ledger.EmissionResult{ProviderRef: "ref-1", Detail: "sent"}
	case x < 93:
		ed.status = ledger.OutboxStatusFailed
	default:
		ed.status = ledger.OutboxStatusDeadLettered
		ed.reason = "bounced"
	}
	if !r.chance(3) {
		ed.next = r.callNow().Add(time.Duration(r.rng.IntN(130)-10)*time.Second + r.nanos())
	}
	if r.chance(50) {
		ed.attempts = r.rng.IntN(5)
	}
	if r.chance(50) {
		ed.lastErr = &ledger.EmissionError{Code: "503", Message: "try later"}
	}
	return ed
}

// current reads the entry an edit starts from; an absent one is made up,
// so that the call answers ErrNotFound (or NotFound) on both sides.
func (r *diffRun) current(s *diffSide, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	e, err := s.o.FindByID(r.ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.OutboxEntry{ID: id, Version: 1}, nil
	}
	return e, err
}

// opSave writes an edit under the current Version, a stale one, one from
// the future, or none (ErrInvalid).
func (r *diffRun) opSave() diffOp {
	key, ed := pickOne(r, diffKeys), r.drawEdit()
	dv, vdesc := int64(0), "current version"
	switch x := r.rng.IntN(100); {
	case x < 75:
	case x < 85:
		dv, vdesc = -1, "previous version"
	case x < 96:
		dv, vdesc = 1, "next version"
	default:
		dv, vdesc = -1<<40, "no version"
	}
	return diffOp{"Save", fmt.Sprintf("Save %s %s with the %s", key, ed, vdesc), writesEntries, []string{key},
		func(s *diffSide) (any, error) {
			e, err := r.current(s, ledger.OutboxEntryIDFor(key))
			if err != nil {
				return nil, err
			}
			ed.apply(&e)
			e.Version = max(e.Version+dv, 0)
			return s.o.Save(r.ctx, e)
		}}
}

func (r *diffRun) opFindByID() diffOp {
	key := pickOne(r, diffKeys)
	return diffOp{"FindByID", "FindByID " + key, writesNothing, nil,
		func(s *diffSide) (any, error) { return s.o.FindByID(r.ctx, ledger.OutboxEntryIDFor(key)) }}
}

func (r *diffRun) limit() int {
	if r.chance(3) {
		return 0 // ErrInvalid
	}
	return 1 + r.rng.IntN(6)
}

func (r *diffRun) opFindPending() diffOp {
	limit := r.limit()
	return diffOp{"FindPending", fmt.Sprintf("FindPending limit %d", limit), writesNothing, nil,
		func(s *diffSide) (any, error) { return s.o.FindPending(r.ctx, limit) }}
}

func (r *diffRun) opFindRetryReady() diffOp {
	now, limit := r.callNow().Add(time.Duration(r.rng.IntN(180))*time.Second), r.limit()
	return diffOp{"FindRetryReady", fmt.Sprintf("FindRetryReady at %s, limit %d", atT0(now), limit), writesNothing, nil,
		func(s *diffSide) (any, error) { return s.o.FindRetryReady(r.ctx, now, limit) }}
}

func (r *diffRun) emissionError() ledger.EmissionError {
	return ledger.EmissionError{Code: pickOne(r, []string{"", "503", "429"}), Message: pickOne(r, []string{"", "busy", "rate limited"})}
}

func (r *diffRun) emissionResult() ledger.EmissionResult {
	return ledger.EmissionResult{ProviderRef: pickOne(r, []string{"", "ref-1", "ref-2"}), Detail: pickOne(r, []string{"", "ok"})}
}

// nextRetry draws MarkFailed's retry: none (terminal), later, already
// past (due now), or zero (ErrInvalid).
func (r *diffRun) nextRetry() (*time.Time, string) {
	var t time.Time
	switch x := r.rng.IntN(100); {
	case x < 35:
		return nil, "no retry"
	case x < 65:
		t = r.w.now.Add(time.Duration(1+r.rng.IntN(120))*time.Second + r.nanos())
	case x < 96:
		t = r.w.now.Add(-time.Duration(1+r.rng.IntN(60))*time.Second - r.nanos())
	default:
		return &t, "zero retry"
	}
	return &t, "retry at " + atT0(t)
}

func (r *diffRun) opMarkDelivered() diffOp {
	key, res := pickOne(r, diffKeys), r.emissionResult()
	return diffOp{"Outbox.MarkDelivered", fmt.Sprintf("Outbox.MarkDelivered %s %+v", key, res), writesEntries, []string{key},
		func(s *diffSide) (any, error) { return s.o.MarkDelivered(r.ctx, ledger.OutboxEntryIDFor(key), res) }}
}

func (r *diffRun) opOutboxMarkFailed() diffOp {
	key, e := pickOne(r, diffKeys), r.emissionError()
	next, ndesc := r.nextRetry()
	return diffOp{"Outbox.MarkFailed", fmt.Sprintf("Outbox.MarkFailed %s %+v, %s", key, e, ndesc), writesEntries, []string{key},
		func(s *diffSide) (any, error) {
			return s.o.MarkFailed(r.ctx, ledger.OutboxEntryIDFor(key), e, cloneTimePtr(next))
		}}
}

func (r *diffRun) opMarkDeadLettered() diffOp {
	key, e := pickOne(r, diffKeys), r.emissionError()
	return diffOp{"Outbox.MarkDeadLettered", fmt.Sprintf("Outbox.MarkDeadLettered %s %+v", key, e), writesEntries, []string{key},
		func(s *diffSide) (any, error) {
			return s.o.MarkDeadLettered(r.ctx, ledger.OutboxEntryIDFor(key), e, "undeliverable")
		}}
}

func (r *diffRun) claimRequest() ledger.ClaimRequest {
	req := ledger.ClaimRequest{Worker: pickOne(r, diffWorkerNames), Now: r.callNow(), LeaseDuration: pickOne(r, diffDurations), Limit: r.limit()}
	if req.Limit > 4 {
		req.Limit -= 2
	}
	return req
}

func descClaimRequest(req ledger.ClaimRequest) string {
	return fmt.Sprintf("by %s at %s for %s, limit %d", req.Worker, atT0(req.Now), req.LeaseDuration, req.Limit)
}

func (r *diffRun) opClaimPending() diffOp {
	req := r.claimRequest()
	return diffOp{"ClaimPending", "ClaimPending " + descClaimRequest(req), writesPending, nil,
		func(s *diffSide) (any, error) {
			cs, err := s.o.ClaimPending(r.ctx, req)
			if err == nil {
				s.rememberClaims(cs)
			}
			return cs, err
		}}
}

func (r *diffRun) opClaimRetryReady() diffOp {
	req := r.claimRequest()
	return diffOp{"ClaimRetryReady", "ClaimRetryReady " + descClaimRequest(req), writesRetryReady, nil,
		func(s *diffSide) (any, error) {
			cs, err := s.o.ClaimRetryReady(r.ctx, req)
			if err == nil {
				s.rememberClaims(cs)
			}
			return cs, err
		}}
}

func (r *diffRun) opClaimDue() diffOp {
	req := r.claimRequest()
	return diffOp{"ClaimDue", "ClaimDue " + descClaimRequest(req), writesDue, nil,
		func(s *diffSide) (any, error) {
			due, ok := s.o.(ledger.DueClaimer)
			if !ok {
				return nil, fmt.Errorf("%s: %T is no ledger.DueClaimer", s.name, s.o)
			}
			cs, err := due.ClaimDue(r.ctx, req)
			if err == nil {
				s.rememberClaims(cs)
			}
			return cs, err
		}}
}

// drawClaim draws a claim; the function returns each side's own claim.
// key names the entry the claim is sent for.
func (r *diffRun) drawClaim() (desc, key string, claim func(s *diffSide) (ledger.Claim, error)) {
	var live []string
	for _, id := range r.entryIDs {
		if e, err := r.sides[0].o.FindByID(r.ctx, ledger.OutboxEntryID(id)); err == nil && e.Claim != nil {
			live = append(live, id)
		}
	}
	g, desc := r.drawGrant(r.claimKeys, r.latestClaim, r.entryIDs, live)
	key = r.name(g.key.id)
	if g.bend == 1 {
		key = r.name(g.other)
	}
	return "claim " + desc, key, func(s *diffSide) (ledger.Claim, error) {
		c := ledger.Claim{EntryID: ledger.OutboxEntryID(g.key.id), Worker: diffWorkerNames[0], Token: forgedToken, Seq: g.key.seq}
		if !g.madeUp {
			var ok bool
			if c, ok = s.claims[g.key]; !ok {
				return c, fmt.Errorf("%w: %s has no claim %s", errMissingGrant, s.name, g.key)
			}
		}
		switch g.bend {
		case 1:
			c.EntryID = ledger.OutboxEntryID(g.other)
		case 2:
			c.Token = forgedToken
		case 3:
			c.Seq++
		case 4:
			c.Seq = 0
		}
		return c, nil
	}
}

// withClaim runs call with each side's claim.
func withClaim(claim func(s *diffSide) (ledger.Claim, error), call func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error)) func(s *diffSide) (any, error) {
	return func(s *diffSide) (any, error) {
		c, err := claim(s)
		if err != nil {
			return nil, err
		}
		return call(s, c)
	}
}

func (r *diffRun) opMarkClaimDelivered() diffOp {
	desc, key, claim := r.drawClaim()
	res := r.emissionResult()
	return diffOp{"MarkClaimDelivered", fmt.Sprintf("MarkClaimDelivered %s %+v", desc, res), writesEntries, []string{key},
		withClaim(claim, func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.o.MarkClaimDelivered(r.ctx, c, res)
		})}
}

func (r *diffRun) opMarkClaimFailed() diffOp {
	desc, key, claim := r.drawClaim()
	e := r.emissionError()
	next, ndesc := r.nextRetry()
	return diffOp{"MarkClaimFailed", fmt.Sprintf("MarkClaimFailed %s %+v, %s", desc, e, ndesc), writesEntries, []string{key},
		withClaim(claim, func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.o.MarkClaimFailed(r.ctx, c, e, cloneTimePtr(next))
		})}
}

func (r *diffRun) opMarkClaimDeadLettered() diffOp {
	desc, key, claim := r.drawClaim()
	e := r.emissionError()
	return diffOp{"MarkClaimDeadLettered", fmt.Sprintf("MarkClaimDeadLettered %s %+v", desc, e), writesEntries, []string{key},
		withClaim(claim, func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.o.MarkClaimDeadLettered(r.ctx, c, e, "undeliverable")
		})}
}

func (r *diffRun) opReleaseClaim() diffOp {
	desc, key, claim := r.drawClaim()
	reason := pickOne(r, []string{"", "shutting down"})
	return diffOp{"ReleaseClaim", fmt.Sprintf("ReleaseClaim %s %q", desc, reason), writesEntries, []string{key},
		withClaim(claim, func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.o.ReleaseClaim(r.ctx, c, reason)
		})}
}

// opSaveClaim writes an edit under a claim; now and then the entry is not
// the claimed one (ErrInvalid).
func (r *diffRun) opSaveClaim() diffOp {
	desc, key, claim := r.drawClaim()
	ed, mismatch := r.drawEdit(), r.chance(3)
	if mismatch {
		desc += " over another entry"
	}
	return diffOp{"SaveClaim", fmt.Sprintf("SaveClaim %s %s", desc, ed), writesEntries, []string{key},
		withClaim(claim, func(s *diffSide, c ledger.Claim) (ledger.OutboxResult, error) {
			e, err := r.current(s, c.EntryID)
			if err != nil {
				return ledger.OutboxResult{}, err
			}
			ed.apply(&e)
			if mismatch {
				e.ID = ledger.OutboxEntryIDFor("not-the-claimed-one")
			}
			return s.o.SaveClaim(r.ctx, c, e)
		})}
}

// opCompleteClaims completes one to four drawn claims in one
// CompleteClaims call, each as one of the claim calls would; two may name
// the same entry, and some claims are stale or forged, like those of the
// single calls.
func (r *diffRun) opCompleteClaims() diffOp {
	n := 1 + r.rng.IntN(4)
	type drawn struct {
		claim func(s *diffSide) (ledger.Claim, error)
		c     ledger.ClaimCompletion
	}
	ds := make([]drawn, n)
	var keys, descs []string
	for i := range ds {
		desc, key, claim := r.drawClaim()
		c := ledger.ClaimCompletion{Op: pickOne(r, []ledger.Operation{
			ledger.OpMarkDelivered, ledger.OpMarkFailed, ledger.OpMarkDeadLettered, ledger.OpReleaseClaim,
		})}
		switch c.Op {
		case ledger.OpMarkDelivered:
			c.Result = r.emissionResult()
		case ledger.OpMarkFailed:
			c.Error = r.emissionError()
			c.NextRetry, _ = r.nextRetry()
		case ledger.OpMarkDeadLettered:
			c.Error, c.Reason = r.emissionError(), "undeliverable"
		case ledger.OpReleaseClaim:
			c.Reason = pickOne(r, []string{"", "shutting down"})
		}
		ds[i] = drawn{claim, c}
		keys = append(keys, key)
		descs = append(descs, fmt.Sprintf("%s %s %+v", c.Op, desc, c))
	}
	return diffOp{"CompleteClaims", fmt.Sprintf("CompleteClaims %v", descs), writesEntries, keys,
		func(s *diffSide) (any, error) {
			cc, ok := s.o.(ledger.ClaimCompleter)
			if !ok {
				return nil, fmt.Errorf("%s: %T is no ledger.ClaimCompleter", s.name, s.o)
			}
			cs := make([]ledger.ClaimCompletion, len(ds))
			for i, d := range ds {
				claim, err := d.claim(s)
				if err != nil {
					return nil, err
				}
				cs[i] = d.c
				cs[i].Claim = claim
				cs[i].NextRetry = cloneTimePtr(d.c.NextRetry)
			}
			return cc.CompleteClaims(r.ctx, cs)
		}}
}
