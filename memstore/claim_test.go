package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// steppingClock returns a clock that moves one millisecond per reading, so
// every stamped timestamp is distinct without reading the wall clock.
func steppingClock(start time.Time) func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return start.Add(time.Duration(n) * time.Millisecond)
	}
}

func env(key string) ledger.Envelope {
	return ledger.Envelope{Provider: "p", Kind: "k", Payload: []byte(key), IdempotencyKey: key}
}

func entryIDs(es []ledger.OutboxEntry) []ledger.OutboxEntryID {
	var out []ledger.OutboxEntryID
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func claimedIDs(cs []ledger.ClaimedEntry) []ledger.OutboxEntryID {
	var out []ledger.OutboxEntryID
	for _, c := range cs {
		out = append(out, c.Entry.ID)
	}
	return out
}

func TestClaimPendingOrderAndSkips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := NewOutbox(WithClock(steppingClock(t0)))
	var ids []ledger.OutboxEntryID
	for i := range 6 {
		r, err := o.Enqueue(ctx, env(fmt.Sprint("key", i)))
		require.NoError(t, err)
		ids = append(ids, r.Entry.ID) // CreatedAt order, not ID order
	}
	req := ledger.ClaimRequest{Worker: "w1", Now: t0.Add(time.Second), LeaseDuration: time.Minute, Limit: 2}
	c1, err := o.ClaimPending(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, ids[:2], claimedIDs(c1))

	// Claimed entries are skipped while their claim is in force...
	req.Worker = "w2"
	c2, err := o.ClaimPending(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, ids[2:4], claimedIDs(c2))
	// ...but FindPending still lists them, oldest first.
	found, err := o.FindPending(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, ids, entryIDs(found))

	// Once the claims expire, the oldest come back first, under new tokens.
	req.Now = t0.Add(2 * time.Minute)
	req.Limit = 3
	c3, err := o.ClaimPending(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, ids[:3], claimedIDs(c3))
	assert.NotEqual(t, c1[0].Claim.Token, c3[0].Claim.Token)
	assert.Equal(t, int64(2), c3[0].Claim.Seq)

	// The first claim was taken over: its completion is lost.
	r, err := o.MarkClaimDelivered(ctx, c1[0].Claim, ledger.EmissionResult{})
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeLeaseLost, r.Outcome)
	r, err = o.MarkClaimDelivered(ctx, c3[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeApplied, r.Outcome)
	// Six enqueues and the lost completion read the clock before this one.
	assert.Equal(t, t0.Add(8*time.Millisecond), r.Entry.EndedAt, "completions are stamped by the clock")
	require.NoError(t, checkOutbox(o))

	found, err = o.FindPending(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, ids[1:], entryIDs(found))
}

func TestClaimRetryReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := NewOutbox(WithClock(steppingClock(t0)))
	var ids []ledger.OutboxEntryID
	for i := range 4 {
		r, err := o.Enqueue(ctx, env(fmt.Sprint("key", i)))
		require.NoError(t, err)
		ids = append(ids, r.Entry.ID)
	}
	// Retries due in reverse order of creation; one far in the future.
	for i, id := range ids {
		next := t0.Add(time.Duration(10-i) * time.Second)
		if i == 0 {
			next = t0.Add(time.Hour)
		}
		_, err := o.MarkFailed(ctx, id, ledger.EmissionError{Message: "x"}, &next)
		require.NoError(t, err)
	}
	now := t0.Add(time.Minute)
	ready, err := o.FindRetryReady(ctx, now, 10)
	require.NoError(t, err)
	assert.Equal(t, []ledger.OutboxEntryID{ids[3], ids[2], ids[1]}, entryIDs(ready))

	cs, err := o.ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "w", Now: now, LeaseDuration: time.Minute, Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []ledger.OutboxEntryID{ids[3], ids[2]}, claimedIDs(cs))
	cs2, err := o.ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "w", Now: now, LeaseDuration: time.Minute, Limit: 5})
	require.NoError(t, err)
	assert.Equal(t, []ledger.OutboxEntryID{ids[1]}, claimedIDs(cs2))

	// A provider defers one entry under its claim: it moves in the index.
	deferred := cs[0].Entry
	deferred.Status = ledger.OutboxStatusDeferred
	deferred.NextAttemptAt = now.Add(time.Second)
	r, err := o.SaveClaim(ctx, cs[0].Claim, deferred)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeApplied, r.Outcome)
	require.NoError(t, checkOutbox(o))
	ready, err = o.FindRetryReady(ctx, now.Add(time.Second), 10)
	require.NoError(t, err)
	assert.Equal(t, []ledger.OutboxEntryID{ids[2], ids[1], ids[3]}, entryIDs(ready))

	// SaveClaim with another entry's ID is malformed.
	other := cs[1].Entry
	other.ID = ids[0]
	_, err = o.SaveClaim(ctx, cs[1].Claim, other)
	require.ErrorIs(t, err, ledger.ErrInvalid)
}

func TestOutboxBaseContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := NewOutbox(WithClock(steppingClock(t0)))
	r, err := o.Enqueue(ctx, env("a"))
	require.NoError(t, err)
	id := r.Entry.ID
	assert.Equal(t, ledger.OutboxEntryIDFor("a"), id)

	again, err := o.Enqueue(ctx, env("a"))
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeRepeated, again.Outcome)
	clash := env("a")
	clash.Payload = []byte("other")
	again, err = o.Enqueue(ctx, clash)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeConflict, again.Outcome)
	assert.Equal(t, int64(1), again.Entry.Version, "nothing written")

	stale := r.Entry
	e := r.Entry
	e.Status = ledger.OutboxStatusDeferred
	e.NextAttemptAt = t0.Add(time.Hour)
	saved, err := o.Save(ctx, e)
	require.NoError(t, err)
	assert.Equal(t, int64(2), saved.Version)
	_, err = o.Save(ctx, stale)
	require.ErrorIs(t, err, ledger.ErrConflict)
	require.NoError(t, checkOutbox(o))

	_, err = o.MarkDelivered(ctx, id, ledger.EmissionResult{ProviderRef: "x"})
	require.NoError(t, err)
	d2, err := o.MarkDelivered(ctx, id, ledger.EmissionResult{ProviderRef: "x"})
	require.NoError(t, err, "delivering again returns the entry unchanged")
	assert.Equal(t, int64(3), d2.Version)
	_, err = o.MarkDeadLettered(ctx, id, ledger.EmissionError{}, "why")
	require.ErrorIs(t, err, ledger.ErrConflict)

	_, err = o.FindByID(ctx, "missing")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = o.MarkDelivered(ctx, "missing", ledger.EmissionResult{})
	require.ErrorIs(t, err, ledger.ErrNotFound)
	zero := time.Time{}
	_, err = o.MarkFailed(ctx, id, ledger.EmissionError{}, &zero)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	res, err := o.ReleaseClaim(ctx, ledger.Claim{EntryID: "missing", Token: "t", Seq: 1}, "")
	require.NoError(t, err)
	assert.Equal(t, ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}, res)
	require.NoError(t, checkOutbox(o))
}

// TestOutboxIndexesFollowRandomOps drives random outbox operations and
// checks after each that the indexes agree with the entries and that
// claims picked exactly what a brute-force scan picks.
func TestOutboxIndexesFollowRandomOps(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 7))
			o := NewOutbox(WithClock(steppingClock(t0)))
			now := t0
			var claims []ledger.Claim
			all := func() []ledger.OutboxEntry {
				o.mu.Lock()
				defer o.mu.Unlock()
				var out []ledger.OutboxEntry
				for _, p := range o.entries {
					out = append(out, p.OutboxEntry)
				}
				return out
			}
			for step := range 300 {
				now = now.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
				switch rng.IntN(7) {
				case 0, 1:
					_, err := o.Enqueue(ctx, env(fmt.Sprint("k", rng.IntN(80))))
					require.NoError(t, err)
				case 2, 3:
					req := ledger.ClaimRequest{Worker: "w", Now: now, LeaseDuration: time.Duration(1+rng.IntN(10)) * time.Millisecond, Limit: 1 + rng.IntN(4)}
					retry := rng.IntN(2) == 0
					var want []ledger.OutboxEntry
					for _, e := range all() {
						if (!retry && storekit.OutboxEntry(e).PendingClaimable(now)) || (retry && storekit.OutboxEntry(e).RetryClaimable(now)) {
							want = append(want, e)
						}
					}
					slices.SortFunc(want, func(a, b ledger.OutboxEntry) int {
						if (!retry && storekit.PendingBefore(a, b)) || (retry && storekit.RetryBefore(a, b)) {
							return -1
						}
						return 1
					})
					want = want[:min(len(want), req.Limit)]
					claim := o.ClaimPending
					if retry {
						claim = o.ClaimRetryReady
					}
					got, err := claim(ctx, req)
					require.NoError(t, err)
					require.Equal(t, entryIDs(want), claimedIDs(got), "step %d", step)
					for _, c := range got {
						claims = append(claims, c.Claim)
					}
				default:
					if len(claims) == 0 {
						continue
					}
					i := rng.IntN(len(claims))
					c := claims[i]
					claims = slices.Delete(claims, i, i+1)
					next := now.Add(time.Duration(rng.IntN(10)) * time.Millisecond)
					var err error
					switch rng.IntN(4) {
					case 0:
						_, err = o.MarkClaimDelivered(ctx, c, ledger.EmissionResult{})
					case 1:
						_, err = o.MarkClaimFailed(ctx, c, ledger.EmissionError{}, &next)
					case 2:
						_, err = o.ReleaseClaim(ctx, c, "")
					case 3:
						e, ferr := o.FindByID(ctx, c.EntryID)
						require.NoError(t, ferr)
						e.Status = ledger.OutboxStatusDeferred
						e.NextAttemptAt = next
						_, err = o.SaveClaim(ctx, c, e)
					}
					require.NoError(t, err)
				}
				require.NoError(t, checkOutbox(o), "step %d", step)
				requireOutboxStats(t, o, now.Add(-3*time.Millisecond), now, now.Add(5*time.Millisecond))
			}
		})
	}
}
