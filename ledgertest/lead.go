package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the Leadership group, run by TestLedger and by
// TestClaimStore on stores that implement ledger.Elector: a lead is held
// by one holder at a time, taken over once it lapses or is given up, and
// a holder whose term ended can neither renew nor give it up. A store
// without Elector skips the group: leadership is optional, and sweepers
// over such a store all do the work.

// newElectorFunc returns a fresh elector for one rule, or false when the
// store under test does not implement ledger.Elector.
type newElectorFunc func(t *testing.T) (ledger.Elector, bool)

// leadRule is one rule of the Leadership group.
type leadRule struct {
	name string
	run  func(t *testing.T, f *leadFixture)
}

// testLeadership runs the Leadership rules, each against a fresh store.
func testLeadership(t *testing.T, newElector newElectorFunc) {
	for _, r := range []leadRule{
		{"TakingAFreeLeadStartsATerm", leadTakeFree},
		{"HeldLeadIsWrongOwner", leadHeldIsWrongOwner},
		{"LapsedLeadIsTakenOver", leadLapsedIsTakenOver},
		{"StaleHolderIsRefused", leadStaleHolderIsRefused},
		{"RenewKeepsTheTermAndMovesTheExpiry", leadRenewKeepsTheTerm},
		{"LapsedLeadIsNotRenewed", leadLapsedIsNotRenewed},
		{"ReleaseLetsAnotherTakeAtOnce", leadReleaseLetsAnotherTake},
		{"UnknownLeadIsNotFound", leadUnknownIsNotFound},
		{"NamesAreIndependent", leadNamesAreIndependent},
		{"TwoHoldersRacing", leadHoldersRacing},
		{"InvalidIsRejected", leadInvalidIsRejected},
		{"CancelledContext", leadCancelledContext},
	} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			e, ok := newElector(t)
			if !ok {
				t.Skip("the store does not implement ledger.Elector: leadership is optional")
			}
			require.NotNil(t, e)
			r.run(t, &leadFixture{t: t, e: e, ctx: t.Context()})
		})
	}
}

// leadFixture wraps the elector under test with the calls the rules make.
type leadFixture struct {
	t   *testing.T
	e   ledger.Elector
	ctx context.Context
}

const (
	leadName = "sweep"
	leadTTL  = 30 * time.Second
)

// take calls TakeLead and requires no error.
func (f *leadFixture) take(name, holder string, now time.Time) ledger.LeadResult {
	f.t.Helper()
	res, err := f.e.TakeLead(f.ctx, name, holder, now, leadTTL)
	require.NoError(f.t, err)
	return res
}

// taken takes name for holder at now and requires that it applied.
func (f *leadFixture) taken(name, holder string, now time.Time) ledger.Lead {
	f.t.Helper()
	res := f.take(name, holder, now)
	require.Equal(f.t, ledger.OutcomeApplied, res.Outcome, "take %s for %s", name, holder)
	require.NotEmpty(f.t, res.Lead.Token, "the taker gets the token")
	return res.Lead
}

func (f *leadFixture) renew(l ledger.Lead, now time.Time) ledger.LeadResult {
	f.t.Helper()
	res, err := f.e.RenewLead(f.ctx, l, now, leadTTL)
	require.NoError(f.t, err)
	return res
}

func (f *leadFixture) release(l ledger.Lead, now time.Time) ledger.LeadResult {
	f.t.Helper()
	res, err := f.e.ReleaseLead(f.ctx, l, now)
	require.NoError(f.t, err)
	return res
}

// get reads name back and requires that it has no token.
func (f *leadFixture) get(name string) ledger.Lead {
	f.t.Helper()
	l, err := f.e.GetLead(f.ctx, name)
	require.NoError(f.t, err)
	require.Empty(f.t, l.Token, "a lead read back never shows its token")
	return l
}

// refused requires that res did not apply, answered want, shows the lead
// as stored without its token, and that nothing was written.
func (f *leadFixture) refused(res ledger.LeadResult, want ledger.Outcome, stored ledger.Lead) {
	f.t.Helper()
	require.Equal(f.t, want, res.Outcome)
	require.False(f.t, res.Applied())
	require.Equal(f.t, stored.Public(), res.Lead, "the result shows the lead as it stands, without a token")
	require.Equal(f.t, stored.Public(), f.get(stored.Name), "a call that does not apply writes nothing")
}

func leadTakeFree(t *testing.T, f *leadFixture) {
	_, err := f.e.GetLead(f.ctx, leadName)
	require.ErrorIs(t, err, ledger.ErrNotFound, "never taken")
	// Sub-microsecond parts of now and of the ttl are dropped.
	now := at(time.Second + 123*time.Nanosecond)
	res, err := f.e.TakeLead(f.ctx, leadName, "holder-a", now, leadTTL+456*time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	require.True(t, res.Applied())
	l := res.Lead
	require.NotEmpty(t, l.Token)
	want := ledger.Lead{Name: leadName, Holder: "holder-a", Token: l.Token, Seq: 1,
		TakenAt: at(time.Second), ExpiresAt: at(time.Second + leadTTL)}
	require.Equal(t, want, l)
	require.Equal(t, want.Public(), f.get(leadName))
	require.True(t, l.HeldAt(at(time.Second+leadTTL-time.Microsecond)))
}

func leadHeldIsWrongOwner(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	// Up to the last microsecond of the term, nobody else takes it.
	f.refused(f.take(leadName, "holder-b", at(leadTTL-time.Microsecond)), ledger.OutcomeWrongOwner, a)
	// Nor does the holder itself take a second term: it renews.
	f.refused(f.take(leadName, "holder-a", at(time.Second)), ledger.OutcomeWrongOwner, a)
}

func leadLapsedIsTakenOver(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	// The holder died and never renewed: at its expiry the lead is free.
	b := f.taken(leadName, "holder-b", at(leadTTL))
	require.Equal(t, a.Seq+1, b.Seq, "a take starts the next term")
	require.NotEqual(t, a.Token, b.Token, "every term has a token of its own")
	require.Equal(t, "holder-b", b.Holder)
	require.Equal(t, at(leadTTL), b.TakenAt)
	require.Equal(t, at(2*leadTTL), b.ExpiresAt)
	require.Equal(t, b.Public(), f.get(leadName))
}

func leadStaleHolderIsRefused(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	b := f.taken(leadName, "holder-b", at(leadTTL+time.Second))
	// holder-a comes back from a stall: its term is over, whatever time
	// it believes it is.
	f.refused(f.renew(a, at(leadTTL+2*time.Second)), ledger.OutcomeLeaseLost, b)
	f.refused(f.renew(a, at(time.Second)), ledger.OutcomeLeaseLost, b)
	f.refused(f.release(a, at(leadTTL+2*time.Second)), ledger.OutcomeLeaseLost, b)
	// A token of the current term with another sequence is no term.
	forged := b
	forged.Seq = a.Seq
	f.refused(f.renew(forged, at(leadTTL+2*time.Second)), ledger.OutcomeLeaseLost, b)
	forged = a
	forged.Seq = b.Seq
	f.refused(f.renew(forged, at(leadTTL+2*time.Second)), ledger.OutcomeLeaseLost, b)
	// The holder of the current term still renews.
	require.Equal(t, ledger.OutcomeApplied, f.renew(b, at(leadTTL+3*time.Second)).Outcome)
}

func leadRenewKeepsTheTerm(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	now := at(10*time.Second + 123*time.Nanosecond)
	res, err := f.e.RenewLead(f.ctx, a, now, leadTTL+456*time.Nanosecond)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	want := a
	want.ExpiresAt = at(10*time.Second + leadTTL)
	require.Equal(t, want, res.Lead, "the same term, token and holder; only the expiry moves")
	require.Equal(t, want.Public(), f.get(leadName))
	// Past the old expiry, the lead is still held...
	f.refused(f.take(leadName, "holder-b", a.ExpiresAt), ledger.OutcomeWrongOwner, want)
	// ...and the holder renews again with the lead it was handed.
	require.Equal(t, ledger.OutcomeApplied, f.renew(a, a.ExpiresAt).Outcome)
}

func leadLapsedIsNotRenewed(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	f.refused(f.renew(a, a.ExpiresAt), ledger.OutcomeLeaseExpired, a)
	f.refused(f.release(a, a.ExpiresAt.Add(time.Hour)), ledger.OutcomeLeaseExpired, a)
	wrong := a
	wrong.Token = storekit.NewToken()
	f.refused(f.renew(wrong, at(time.Second)), ledger.OutcomeLeaseLost, a)
	// LeaseLost comes before LeaseExpired.
	f.refused(f.renew(wrong, a.ExpiresAt), ledger.OutcomeLeaseLost, a)
}

func leadReleaseLetsAnotherTake(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	res := f.release(a, at(5*time.Second))
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	given := a.Public()
	given.ExpiresAt = at(5 * time.Second)
	require.Equal(t, given, res.Lead, "given up at now; the last holder stays readable")
	require.Equal(t, given, f.get(leadName))
	require.False(t, res.Lead.HeldAt(at(5*time.Second)))
	// Given up twice: the second finds it already run out.
	f.refused(f.release(a, at(6*time.Second)), ledger.OutcomeLeaseExpired, given)
	f.refused(f.renew(a, at(6*time.Second)), ledger.OutcomeLeaseExpired, given)
	// Another holder takes it at once, long before the old expiry.
	b := f.taken(leadName, "holder-b", at(5*time.Second))
	require.Equal(t, a.Seq+1, b.Seq)
	f.refused(f.renew(a, at(6*time.Second)), ledger.OutcomeLeaseLost, b)
}

func leadUnknownIsNotFound(t *testing.T, f *leadFixture) {
	ghost := ledger.Lead{Name: "ghost", Token: storekit.NewToken(), Seq: 1}
	for _, res := range []ledger.LeadResult{f.renew(ghost, t0), f.release(ghost, t0)} {
		require.Equal(t, ledger.OutcomeNotFound, res.Outcome)
		require.Equal(t, ledger.Lead{}, res.Lead)
	}
	_, err := f.e.GetLead(f.ctx, "ghost")
	require.ErrorIs(t, err, ledger.ErrNotFound, "renew and release create nothing")
}

func leadNamesAreIndependent(t *testing.T, f *leadFixture) {
	x := f.taken("sweep.expire", "holder-a", t0)
	y := f.taken("sweep.purge", "holder-b", t0)
	require.Equal(t, int64(1), x.Seq)
	require.Equal(t, int64(1), y.Seq)
	f.refused(f.renew(ledger.Lead{Name: "sweep.purge", Token: x.Token, Seq: x.Seq}, at(time.Second)), ledger.OutcomeLeaseLost, y)
}

// leadHoldersRacing has many holders take one lead at the same instant,
// term after term: each term has exactly one holder, and every loser
// sees it.
func leadHoldersRacing(t *testing.T, f *leadFixture) {
	const holders, terms = 12, 5
	for term := range terms {
		now := at(time.Duration(term) * leadTTL)
		type answer struct {
			holder string
			res    ledger.LeadResult
			err    error
		}
		answers := make([]answer, holders)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				holder := fmt.Sprintf("holder-%02d", i)
				res, err := f.e.TakeLead(f.ctx, leadName, holder, now, leadTTL)
				answers[i] = answer{holder, res, err}
			}()
		}
		close(start)
		wg.Wait()
		var winners []answer
		for _, a := range answers {
			require.NoError(t, a.err, a.holder)
			switch a.res.Outcome {
			case ledger.OutcomeApplied:
				winners = append(winners, a)
			case ledger.OutcomeWrongOwner:
				assert.Empty(t, a.res.Lead.Token, "a loser never sees the winner's token")
			default:
				t.Fatalf("term %d: %s got %s", term, a.holder, a.res.Outcome)
			}
		}
		require.Len(t, winners, 1, "term %d: exactly one holder wins", term)
		w := winners[0]
		require.Equal(t, int64(term+1), w.res.Lead.Seq, "one term per race")
		require.Equal(t, w.holder, f.get(leadName).Holder)
		for _, a := range answers {
			if a.res.Outcome == ledger.OutcomeWrongOwner {
				assert.Equal(t, w.holder, a.res.Lead.Holder, "a loser sees who won")
			}
		}
	}
}

func leadInvalidIsRejected(t *testing.T, f *leadFixture) {
	a := f.taken(leadName, "holder-a", t0)
	noToken := a
	noToken.Token = ""
	noName := a
	noName.Name = ""
	for name, call := range map[string]func() error{
		"take empty name":     func() error { _, err := f.e.TakeLead(f.ctx, "", "h", t0, leadTTL); return err },
		"take empty holder":   func() error { _, err := f.e.TakeLead(f.ctx, "other", "", t0, leadTTL); return err },
		"take control holder": func() error { _, err := f.e.TakeLead(f.ctx, "other", "h\n", t0, leadTTL); return err },
		"take zero now":       func() error { _, err := f.e.TakeLead(f.ctx, "other", "h", time.Time{}, leadTTL); return err },
		"take zero ttl":       func() error { _, err := f.e.TakeLead(f.ctx, "other", "h", t0, 0); return err },
		"take nil context":    func() error { _, err := f.e.TakeLead(nilContext(), "other", "h", t0, leadTTL); return err },
		"renew no token":      func() error { _, err := f.e.RenewLead(f.ctx, noToken, t0, leadTTL); return err },
		"renew no name":       func() error { _, err := f.e.RenewLead(f.ctx, noName, t0, leadTTL); return err },
		"renew negative ttl":  func() error { _, err := f.e.RenewLead(f.ctx, a, t0, -time.Second); return err },
		"release zero now":    func() error { _, err := f.e.ReleaseLead(f.ctx, a, time.Time{}); return err },
		"get empty name":      func() error { _, err := f.e.GetLead(f.ctx, ""); return err },
	} {
		err := call()
		require.ErrorIs(t, err, ledger.ErrInvalid, name)
		var inv *ledger.InvalidError
		require.ErrorAs(t, err, &inv, name)
		require.NotEmpty(t, inv.Field, name)
	}
	require.Equal(t, a.Public(), f.get(leadName), "a rejected call writes nothing")
	_, err := f.e.GetLead(f.ctx, "other")
	require.ErrorIs(t, err, ledger.ErrNotFound, "a rejected take creates nothing")
}

func leadCancelledContext(t *testing.T, f *leadFixture) {
	ctx := cancelledContext(t)
	_, err := f.e.TakeLead(ctx, leadName, "holder-a", t0, leadTTL)
	require.ErrorIs(t, err, context.Canceled)
	_, err = f.e.GetLead(f.ctx, leadName)
	require.ErrorIs(t, err, ledger.ErrNotFound, "a cancelled take takes nothing")
}
