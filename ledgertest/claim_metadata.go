package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxMetadata checks the metadata of outbox entries
// (Envelope.Metadata), as testMetadata does for deliveries: stored and
// returned by every read and claim, nil and empty the same, not part of
// the envelope's content, copied in and out, and changed by no
// transition, Save and SaveClaim included.
func testOutboxMetadata(t *testing.T, newStore NewClaimStoreFunc) {
	withMetadata := func(key string, md ledger.Metadata) ledger.Envelope {
		env := claimEnvelope(key)
		env.Metadata = md
		return env
	}
	enqueue := func(t *testing.T, s ledger.ClaimStore, env ledger.Envelope) ledger.OutboxEntry {
		t.Helper()
		res, err := s.Enqueue(t.Context(), env)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		return res.Entry
	}

	claimRun(t, "RoundTrips", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := enqueue(t, s, withMetadata("order-1", richMetadata()))
		require.Equal(t, richMetadata(), e.Envelope.Metadata, "the result carries the metadata")
		claimRequireStored(t, s, e)
		pending, err := s.FindPending(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, pending, 1)
		require.Equal(t, richMetadata(), pending[0].Envelope.Metadata, "FindPending returns it")
		if l, ok := s.(ledger.OutboxLister); ok {
			page, err := l.ListEntries(t.Context(), ledger.OutboxListQuery{Limit: 10})
			require.NoError(t, err)
			require.Len(t, page.Entries, 1)
			require.Equal(t, richMetadata(), page.Entries[0].Envelope.Metadata, "ListEntries returns it")
		}
		ce := claimOnlyPending(t, s, e.ID, claimT0)
		require.Equal(t, richMetadata(), ce.Entry.Envelope.Metadata, "a claim returns it")

		b, ok := s.(ledger.OutboxBatchEnqueuer)
		require.True(t, ok, "%T does not implement ledger.OutboxBatchEnqueuer", s)
		res, err := b.EnqueueBatch(t.Context(), []ledger.Envelope{withMetadata("b-1", ledger.Metadata{"tenant": "acme"}), claimEnvelope("b-2")})
		require.NoError(t, err)
		require.Equal(t, ledger.Metadata{"tenant": "acme"}, res[0].Entry.Envelope.Metadata)
		require.Nil(t, res[1].Entry.Envelope.Metadata)
		claimRequireStored(t, s, res[0].Entry)
		claimRequireStored(t, s, res[1].Entry)
	})

	claimRun(t, "AtTheLimitsRoundTrips", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := enqueue(t, s, withMetadata("order-1", largestMetadata()))
		require.Equal(t, largestMetadata(), e.Envelope.Metadata)
		require.Equal(t, largestMetadata(), claimFind(t, s, e.ID).Envelope.Metadata)
	})

	claimRun(t, "NilAndEmptyAreTheSame", newStore, func(t *testing.T, s ledger.ClaimStore) {
		for key, md := range map[string]ledger.Metadata{"order-nil": nil, "order-empty": {}} {
			e := enqueue(t, s, withMetadata(key, md))
			require.Nil(t, e.Envelope.Metadata, "%s: empty metadata reads back as nil", key)
			require.Nil(t, claimFind(t, s, e.ID).Envelope.Metadata, "%s", key)
		}
	})

	claimRun(t, "IsNotContent", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := enqueue(t, s, withMetadata("order-1", ledger.Metadata{"traceparent": "first try"}))
		res, err := s.Enqueue(t.Context(), withMetadata("order-1", ledger.Metadata{"traceparent": "second try", "extra": "v"}))
		claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeRepeated)
		res, err = s.Enqueue(t.Context(), claimEnvelope("order-1"))
		claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeRepeated)
		other := withMetadata("order-1", ledger.Metadata{"traceparent": "first try"})
		other.Payload = []byte("other payload")
		res, err = s.Enqueue(t.Context(), other)
		claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeConflict)

		b, ok := s.(ledger.OutboxBatchEnqueuer)
		require.True(t, ok, "%T does not implement ledger.OutboxBatchEnqueuer", s)
		batch, err := b.EnqueueBatch(t.Context(), []ledger.Envelope{
			withMetadata("b-1", ledger.Metadata{"n": "1"}), withMetadata("b-1", ledger.Metadata{"n": "2"}),
		})
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, batch[0].Outcome)
		require.Equal(t, ledger.OutcomeRepeated, batch[1].Outcome, "judged against the earlier envelope")
		require.Equal(t, ledger.Metadata{"n": "1"}, batch[1].Entry.Envelope.Metadata)
		require.Equal(t, ledger.Metadata{"n": "1"}, claimFind(t, s, batch[0].Entry.ID).Envelope.Metadata)
	})

	claimRun(t, "IsCopied", newStore, func(t *testing.T, s ledger.ClaimStore) {
		md := ledger.Metadata{"tenant": "acme"}
		e := enqueue(t, s, withMetadata("order-1", md))
		md["tenant"] = "changed by the caller"
		e.Envelope.Metadata["tenant"] = "changed in the result"
		got := claimFind(t, s, e.ID)
		require.Equal(t, ledger.Metadata{"tenant": "acme"}, got.Envelope.Metadata, "the store shares no map with its callers")
		got.Envelope.Metadata["tenant"] = "changed in a read"
		require.Equal(t, ledger.Metadata{"tenant": "acme"}, claimFind(t, s, e.ID).Envelope.Metadata)
	})

	claimRun(t, "KeptByEveryTransition", newStore, func(t *testing.T, s ledger.ClaimStore) {
		md := richMetadata()
		keys := []string{"delivered", "retried", "deferred", "released", "dead", "saved", "base-failed", "base-delivered"}
		ids := map[string]ledger.OutboxEntryID{}
		for _, k := range keys {
			ids[k] = enqueue(t, s, withMetadata(k, md)).ID
		}
		other := ledger.Metadata{"changed": "by the caller"}
		// Save writes only the mutable fields, whatever metadata the
		// entry it is given carries.
		saved := claimFind(t, s, ids["saved"])
		saved.Status = ledger.OutboxStatusDeferred
		saved.NextAttemptAt = claimAt(time.Hour)
		saved.Envelope.Metadata = other
		_, err := s.Save(t.Context(), saved)
		require.NoError(t, err)
		_, err = s.MarkFailed(t.Context(), ids["base-failed"], ledger.EmissionError{Message: "down"}, nil)
		require.NoError(t, err)
		_, err = s.MarkDelivered(t.Context(), ids["base-delivered"], ledger.EmissionResult{ProviderRef: "ref"})
		require.NoError(t, err)

		claimed := map[ledger.OutboxEntryID]ledger.ClaimedEntry{}
		for _, ce := range claimPending(t, s, claimT0, ledger.MaxLimit) {
			require.Equal(t, md, ce.Entry.Envelope.Metadata, "a claim returns the metadata of %s", ce.Entry.ID)
			claimed[ce.Entry.ID] = ce
		}
		require.Len(t, claimed, 5)
		claim := func(k string) ledger.Claim { return claimed[ids[k]].Claim }
		if r, ok := s.(ledger.ClaimRenewer); ok {
			res, err := r.RenewClaim(t.Context(), claim("delivered"), claimAt(time.Second), claimLease)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		}
		res, err := s.MarkClaimDelivered(t.Context(), claim("delivered"), ledger.EmissionResult{ProviderRef: "ref"})
		require.NoError(t, err)
		require.Equal(t, md, res.Entry.Envelope.Metadata)
		next := claimAt(time.Minute)
		_, err = s.MarkClaimFailed(t.Context(), claim("retried"), ledger.EmissionError{Message: "busy"}, &next)
		require.NoError(t, err)
		deferred := claimed[ids["deferred"]].Entry
		deferred.Status = ledger.OutboxStatusDeferred
		deferred.NextAttemptAt = claimAt(time.Hour)
		deferred.Envelope.Metadata = other
		res, err = s.SaveClaim(t.Context(), claim("deferred"), deferred)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		require.Equal(t, md, res.Entry.Envelope.Metadata, "SaveClaim does not write metadata")
		_, err = s.ReleaseClaim(t.Context(), claim("released"), "shutting down")
		require.NoError(t, err)
		_, err = s.MarkClaimDeadLettered(t.Context(), claim("dead"), ledger.EmissionError{Message: "gone"}, "permanent")
		require.NoError(t, err)
		retried := claimRetry(t, s, next, ledger.MaxLimit)
		require.Len(t, retried, 1)
		require.Equal(t, md, retried[0].Entry.Envelope.Metadata, "a retry claim returns it")

		for _, k := range keys {
			got := claimFind(t, s, ids[k])
			require.Equal(t, md, got.Envelope.Metadata, "%s (%s) keeps its metadata", k, got.Status)
		}
	})

	claimRun(t, "KeptByBatchCompletion", newStore, func(t *testing.T, s ledger.ClaimStore) {
		md := richMetadata()
		var claims []ledger.Claim
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			e := enqueue(t, s, withMetadata("batch-"+k, md))
			ce := claimOnlyPending(t, s, e.ID, claimT0)
			require.Equal(t, md, ce.Entry.Envelope.Metadata)
			claims = append(claims, ce.Claim)
		}
		cs := batchCompletions(claims)
		// As SaveClaim, a saving completion writes no metadata, whatever
		// its entry carries.
		for i := range cs {
			if cs[i].Op == ledger.OpSaveClaim {
				cs[i].Entry.Envelope.Metadata = ledger.Metadata{"changed": "by the caller"}
			}
		}
		got, err := claimCompleter(t, s).CompleteClaims(t.Context(), cs)
		require.NoError(t, err)
		require.Len(t, got, len(cs))
		for i, res := range got {
			require.True(t, res.Applied(), "%s", cs[i].Op)
			require.Equal(t, md, res.Entry.Envelope.Metadata, "%s: the batch's result carries it", cs[i].Op)
			require.Equal(t, md, claimFind(t, s, cs[i].Claim.EntryID).Envelope.Metadata, "%s: the entry keeps it", cs[i].Op)
		}
	})
}
