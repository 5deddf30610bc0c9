package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// t0 is the fixed instant every test computes its times from. Time moves
// only by passing t0.Add(d) as a later now; nothing reads the wall clock.
var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus d, for reading tests as a timeline.
func at(d time.Duration) time.Time { return t0.Add(d) }

// nilContext returns a nil context.Context, so that tests can pass one
// without tripping vet's check for a literal nil context.
func nilContext() context.Context { return nil }

// cancelledContext returns a context that is already cancelled.
func cancelledContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// requireInvalid asserts that err is a validation error: it matches
// ledger.ErrInvalid and is an *ledger.InvalidError naming a field.
func requireInvalid(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	var inv *ledger.InvalidError
	require.True(t, errors.As(err, &inv), "error %v is not an *ledger.InvalidError", err)
	require.NotEmpty(t, inv.Field, "InvalidError must name the field")
}

// requireNoToken asserts that d, a record a store handed out, carries no
// token: a token reaches only the grantee, in the Lease that Lease returns.
func requireNoToken(t *testing.T, d ledger.Delivery) {
	t.Helper()
	if d.Lease != nil {
		require.Empty(t, d.Lease.Token, "delivery %s: a record handed out carries no lease token", d.ID)
	}
	if d.EndedLease != nil {
		require.Empty(t, d.EndedLease.Token, "delivery %s: a record handed out carries no ended lease's token", d.ID)
	}
}

// requireNoClaimToken is requireNoToken for outbox entries.
func requireNoClaimToken(t *testing.T, e ledger.OutboxEntry) {
	t.Helper()
	if e.Claim != nil {
		require.Empty(t, e.Claim.Token, "entry %s: an entry handed out carries no claim token", e.ID)
	}
	if e.EndedClaim != nil {
		require.Empty(t, e.EndedClaim.Token, "entry %s: an entry handed out carries no ended claim's token", e.ID)
	}
}

// withoutToken returns l as a record handed out shows it.
func withoutToken(l ledger.Lease) ledger.Lease {
	l.Token = ""
	return l
}

// claimWithoutToken returns c as an entry handed out shows it.
func claimWithoutToken(c ledger.Claim) ledger.Claim {
	c.Token = ""
	return c
}
