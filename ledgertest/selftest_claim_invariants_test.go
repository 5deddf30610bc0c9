package ledgertest_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
)

var invT0 = time.Date(2031, time.January, 2, 3, 4, 5, 0, time.UTC)

// invAt returns invT0 plus n microseconds.
func invAt(n int) time.Time { return invT0.Add(time.Duration(n) * time.Microsecond) }

// invGrant returns claim seq of entry id held on [from, to) in µs after invT0.
func invGrant(id string, seq int64, from, to int) ledger.Claim {
	return ledger.Claim{
		EntryID:   ledger.OutboxEntryID(id),
		Worker:    "w",
		Token:     ledger.Token(fmt.Sprintf("%s-%d", id, seq)),
		Seq:       seq,
		ClaimedAt: invAt(from),
		ExpiresAt: invAt(to),
	}
}

// invEnd returns an end of c by op at µs at after invT0.
func invEnd(c ledger.Claim, op ledger.Operation, at int) ledgertest.ClaimEnd {
	return ledgertest.ClaimEnd{Claim: c, Op: op, At: invAt(at)}
}

// invJoined returns how many errors err joins.
func invJoined(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestCheckClaimsExclusive(t *testing.T) {
	a1, a2, a3 := invGrant("a", 1, 0, 10), invGrant("a", 2, 10, 20), invGrant("a", 3, 30, 40)
	for _, tc := range []struct {
		name  string
		log   ledgertest.ClaimLog
		wantN int // violations; 0 for none
	}{
		{"Empty", ledgertest.ClaimLog{}, 0},
		{"DisjointClaims", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, a2, a3}}, 0},
		{"NextStartsAtExpiresAt", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, invGrant("a", 2, 10, 11)}}, 0},
		{"OverlappingUnexpiredClaims", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, invGrant("a", 2, 9, 20)}}, 1},
		{"OtherEntriesMayOverlap", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, invGrant("b", 1, 5, 15)}}, 0},
		{
			"EndedClaimFreesTheEntryAtItsEnd",
			ledgertest.ClaimLog{Grants: []ledger.Claim{a1, invGrant("a", 2, 4, 14)}, Ends: []ledgertest.ClaimEnd{invEnd(a1, ledger.OpReleaseClaim, 3)}},
			0,
		},
		{
			"ClaimBeforeTheEndOverlaps",
			ledgertest.ClaimLog{Grants: []ledger.Claim{a1, invGrant("a", 2, 2, 14)}, Ends: []ledgertest.ClaimEnd{invEnd(a1, ledger.OpReleaseClaim, 3)}},
			1,
		},
		{
			"LateEndDoesNotExtendTheClaim",
			ledgertest.ClaimLog{Grants: []ledger.Claim{a1, a2}, Ends: []ledgertest.ClaimEnd{invEnd(a1, ledger.OpMarkFailed, 15)}},
			0,
		},
		{
			// After an end, a caller with a lagging clock may claim at a Now
			// before the ended claim even began.
			"LaggingClockAfterAnEnd",
			ledgertest.ClaimLog{
				Grants: []ledger.Claim{invGrant("a", 1, 100, 110), invGrant("a", 2, 60, 70)},
				Ends:   []ledgertest.ClaimEnd{invEnd(invGrant("a", 1, 100, 110), ledger.OpSaveClaim, 50)},
			},
			0,
		},
		{
			"OnlySuccessiveClaimsAreCompared",
			ledgertest.ClaimLog{
				Grants: []ledger.Claim{invGrant("a", 1, 0, 100), invGrant("a", 2, 100, 200), invGrant("a", 3, 50, 60)},
				Ends:   []ledgertest.ClaimEnd{invEnd(invGrant("a", 2, 100, 200), ledger.OpReleaseClaim, 40)},
			},
			0,
		},
		{"SeqGrantedTwice", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, func() ledger.Claim { c := a1; c.Token = "other"; return c }()}}, 1},
		{"TokenGrantedTwice", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, a1}}, 2},
		{"TokenReusedAcrossEntries", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, func() ledger.Claim { c := invGrant("b", 1, 0, 10); c.Token = a1.Token; return c }()}}, 1},
		{
			"EndedTwice",
			ledgertest.ClaimLog{Grants: []ledger.Claim{a1}, Ends: []ledgertest.ClaimEnd{invEnd(a1, ledger.OpReleaseClaim, 3), invEnd(a1, ledger.OpMarkDelivered, 4)}},
			1,
		},
		{"EndOfAClaimNeverGranted", ledgertest.ClaimLog{Grants: []ledger.Claim{a1}, Ends: []ledgertest.ClaimEnd{invEnd(a2, ledger.OpMarkDelivered, 12)}}, 1},
		{
			"EndWithAWrongToken",
			ledgertest.ClaimLog{Grants: []ledger.Claim{a1}, Ends: []ledgertest.ClaimEnd{invEnd(func() ledger.Claim { c := a1; c.Token = "forged"; return c }(), ledger.OpMarkDelivered, 4)}},
			1,
		},
		{"EmptyHold", ledgertest.ClaimLog{Grants: []ledger.Claim{invGrant("a", 1, 5, 5)}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ledgertest.CheckClaimsExclusive(tc.log)
			if tc.wantN == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.wantN, invJoined(err))
		})
	}
}

func TestCheckClaimsExclusiveIgnoresLogOrder(t *testing.T) {
	t.Parallel()
	var log ledgertest.ClaimLog
	for e := range 5 {
		id := fmt.Sprintf("e%d", e)
		for seq := int64(1); seq <= 4; seq++ {
			from := int(seq-1) * 10
			c := invGrant(id, seq, from, from+10)
			log.Grants = append(log.Grants, c)
			log.Ends = append(log.Ends, invEnd(c, ledger.OpReleaseClaim, from+5))
		}
	}
	// Squeeze one grant into the hold of the one before it.
	log.Grants[6].ClaimedAt = log.Grants[5].ClaimedAt.Add(time.Microsecond)
	log.Ends[5].At = log.Grants[6].ClaimedAt.Add(time.Microsecond)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10 {
		rng.Shuffle(len(log.Grants), func(i, j int) { log.Grants[i], log.Grants[j] = log.Grants[j], log.Grants[i] })
		rng.Shuffle(len(log.Ends), func(i, j int) { log.Ends[i], log.Ends[j] = log.Ends[j], log.Ends[i] })
		assert.Equal(t, 1, invJoined(ledgertest.CheckClaimsExclusive(log)))
	}
}

func TestCheckClaimsExclusiveBoundsItsReport(t *testing.T) {
	t.Parallel()
	var log ledgertest.ClaimLog
	for i := range 100 {
		id := fmt.Sprintf("e%d", i)
		log.Grants = append(log.Grants, invGrant(id, 1, 0, 10), invGrant(id, 2, 5, 15))
	}
	err := ledgertest.CheckClaimsExclusive(log)
	require.Error(t, err)
	assert.Equal(t, 21, invJoined(err), "20 violations and a count of the rest")
}

func TestCheckClaimsTerminal(t *testing.T) {
	t.Parallel()
	ended := func(id string, s ledger.OutboxStatus) ledger.OutboxEntry {
		return ledger.OutboxEntry{ID: ledger.OutboxEntryID(id), Status: s, EndedAt: invT0}
	}
	all := []ledger.OutboxEntry{
		ended("a", ledger.OutboxStatusDelivered),
		ended("b", ledger.OutboxStatusFailed),
		ended("c", ledger.OutboxStatusDeadLettered),
	}
	require.NoError(t, ledgertest.CheckClaimsTerminal(all))
	require.NoError(t, ledgertest.CheckClaimsTerminal(nil))

	open := append(all[:len(all):len(all)],
		ledger.OutboxEntry{ID: "d", Status: ledger.OutboxStatusPending},
		ended("e", ledger.OutboxStatusRetryScheduled),
		ledger.OutboxEntry{ID: "f", Status: ledger.OutboxStatusDelivered},
		func() ledger.OutboxEntry {
			e := ended("g", ledger.OutboxStatusDelivered)
			e.Claim = &ledger.Claim{EntryID: "g", Token: "t", Seq: 1}
			return e
		}(),
	)
	assert.Equal(t, 4, invJoined(ledgertest.CheckClaimsTerminal(open)))
}

func TestCheckClaimAttempts(t *testing.T) {
	a1, a2, a3 := invGrant("a", 1, 0, 10), invGrant("a", 2, 10, 20), invGrant("a", 3, 20, 30)
	b1 := invGrant("b", 1, 0, 10)
	log := ledgertest.ClaimLog{
		Grants: []ledger.Claim{a3, a1, b1, a2},
		Ends: []ledgertest.ClaimEnd{
			invEnd(a1, ledger.OpReleaseClaim, 5),
			invEnd(a2, ledger.OpMarkFailed, 15),
			invEnd(a3, ledger.OpMarkDelivered, 25),
			invEnd(b1, ledger.OpReleaseClaim, 5),
		},
	}
	entry := func(id string, seq int64, attempts int) ledger.OutboxEntry {
		return ledger.OutboxEntry{ID: ledger.OutboxEntryID(id), ClaimSeq: seq, Attempts: attempts}
	}
	for _, tc := range []struct {
		name    string
		log     ledgertest.ClaimLog
		entries []ledger.OutboxEntry
		wantN   int
	}{
		{"Consistent", log, []ledger.OutboxEntry{entry("a", 3, 2), entry("b", 1, 0), entry("c", 0, 0)}, 0},
		{"AttemptNotCounted", log, []ledger.OutboxEntry{entry("a", 3, 1), entry("b", 1, 0)}, 1},
		{"ReleaseNotGivenBack", log, []ledger.OutboxEntry{entry("a", 3, 2), entry("b", 1, 1)}, 1},
		{"ClaimSeqBehind", log, []ledger.OutboxEntry{entry("a", 2, 2), entry("b", 1, 0)}, 1},
		{"GrantMissingFromTheLog", ledgertest.ClaimLog{Grants: []ledger.Claim{a1, a3}}, []ledger.OutboxEntry{entry("a", 3, 2)}, 2},
		{"ClaimedEntryNotChecked", log, []ledger.OutboxEntry{entry("a", 3, 2)}, 1},
		{"UnclaimedEntryWithAttempts", ledgertest.ClaimLog{}, []ledger.OutboxEntry{entry("c", 0, 1)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ledgertest.CheckClaimAttempts(tc.log, tc.entries)
			if tc.wantN == 0 {
				require.NoError(t, err)
				return
			}
			assert.Equal(t, tc.wantN, invJoined(err))
		})
	}
}
