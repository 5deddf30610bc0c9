package ledgertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testMetadata checks the metadata of deliveries (ledger.Metadata): it is
// stored and returned by every read, nil and empty are the same, it is not
// enqueue content, the store copies it in and out, and no transition
// changes it.
func testMetadata(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"RoundTrips", metadataRoundTrips},
		{"AtTheLimitsRoundTrips", metadataAtTheLimits},
		{"NilAndEmptyAreTheSame", metadataNilAndEmpty},
		{"IsNotContent", metadataIsNotContent},
		{"IsCopied", metadataIsCopied},
		{"KeptByEveryTransition", metadataKeptByEveryTransition},
	})
}

// richMetadata returns metadata whose keys and values need care to store
// and read back: a W3C trace context, quotes, backslashes, markup, line
// breaks, non-ASCII letters, a line separator and an empty value.
func richMetadata() ledger.Metadata {
	return ledger.Metadata{
		"traceparent":    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tracestate":     "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"quoted \"key\"": `back\slash and "quotes"`,
		"markup":         "<b>&amp;</b> 'single'",
		"lines":          "one\ntwo\r\n\tthree",
		"tenant-Ä":       "Mañana, 東京, \u2028 and 🎉",
		"empty":          "",
	}
}

// largestMetadata returns metadata at every bound at once: the most keys,
// one key of the longest name, and exactly the most bytes.
func largestMetadata() ledger.Metadata {
	md := ledger.Metadata{strings.Repeat("k", ledger.MaxNameBytes): ""}
	size := ledger.MaxNameBytes
	for i := 1; i < ledger.MaxMetadataEntries; i++ {
		k := fmt.Sprintf("key-%02d", i)
		md[k] = ""
		size += len(k)
	}
	md["key-01"] = strings.Repeat("é", (ledger.MaxMetadataBytes-size)/2)
	if (ledger.MaxMetadataBytes-size)%2 == 1 {
		md["key-02"] = "x"
	}
	return md
}

func metadataRoundTrips(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Metadata = richMetadata()
	d := f.enqueue(r, t0)
	require.Equal(t, richMetadata(), d.Metadata, "the result carries the metadata")
	require.Equal(t, d, f.get("d-1"), "Get returns it")
	require.Equal(t, []ledger.Delivery{d}, f.all(), "List returns it")

	items := []ledger.EnqueueRequest{req("b-1", "host-1"), req("b-2", "host-1")}
	items[0].Metadata = ledger.Metadata{"tenant": "acme"}
	res, err := f.batcher().EnqueueBatch(f.ctx, items, t0)
	require.NoError(t, err)
	require.Equal(t, ledger.Metadata{"tenant": "acme"}, res[0].Delivery.Metadata)
	require.Nil(t, res[1].Delivery.Metadata)
	require.Equal(t, res[0].Delivery, f.get("b-1"))
	require.Equal(t, res[1].Delivery, f.get("b-2"))
}

func metadataAtTheLimits(t *testing.T, f *ledgerFixture) {
	md := largestMetadata()
	require.NoError(t, storekit.ValidateMetadata("metadata", md), "the fixture sits at the limits, not past them")
	r := req("d-1", "host-1")
	r.Metadata = md
	d := f.enqueue(r, t0)
	require.Equal(t, md, d.Metadata)
	require.Equal(t, md, f.get("d-1").Metadata)
}

func metadataNilAndEmpty(t *testing.T, f *ledgerFixture) {
	for id, md := range map[ledger.DeliveryID]ledger.Metadata{"d-nil": nil, "d-empty": {}} {
		r := req(id, "host-1")
		r.Metadata = md
		require.Nil(t, f.enqueue(r, t0).Metadata, "%s: empty metadata reads back as nil", id)
		require.Nil(t, f.get(id).Metadata, "%s", id)
		r.Metadata = ledger.Metadata{"late": "v"}
		res, err := f.l.Enqueue(f.ctx, r, t0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeRepeated, res.Outcome, "%s: metadata added on a retry is not content", id)
	}
}

func metadataIsNotContent(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Metadata = ledger.Metadata{"traceparent": "first try"}
	d := f.enqueue(r, t0)

	retry := r
	retry.Metadata = ledger.Metadata{"traceparent": "second try", "extra": "v"}
	f.notApplied(d, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, retry, at(time.Second)))
	retry.Metadata = nil
	f.notApplied(d, ledger.OutcomeRepeated)(f.l.Enqueue(f.ctx, retry, at(time.Second)))
	retry.Payload = []byte("other payload")
	f.notApplied(d, ledger.OutcomeConflict)(f.l.Enqueue(f.ctx, retry, at(time.Second)))

	// In one batch the later request is judged against the earlier one,
	// whose metadata the record keeps.
	a, b := req("b-1", "host-1"), req("b-1", "host-1")
	a.Metadata, b.Metadata = ledger.Metadata{"n": "1"}, ledger.Metadata{"n": "2"}
	res, err := f.batcher().EnqueueBatch(f.ctx, []ledger.EnqueueRequest{a, b}, t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res[0].Outcome)
	require.Equal(t, ledger.OutcomeRepeated, res[1].Outcome)
	require.Equal(t, ledger.Metadata{"n": "1"}, f.get("b-1").Metadata)
	require.Equal(t, ledger.Metadata{"n": "1"}, res[1].Delivery.Metadata)
}

func metadataIsCopied(t *testing.T, f *ledgerFixture) {
	md := ledger.Metadata{"tenant": "acme"}
	r := req("d-1", "host-1")
	r.Metadata = md
	d := f.enqueue(r, t0)
	md["tenant"] = "changed by the caller"
	d.Metadata["tenant"] = "changed in the result"
	got := f.get("d-1")
	require.Equal(t, ledger.Metadata{"tenant": "acme"}, got.Metadata, "the store shares no map with its callers")
	got.Metadata["tenant"] = "changed in a read"
	require.Equal(t, ledger.Metadata{"tenant": "acme"}, f.get("d-1").Metadata)
}

func metadataKeptByEveryTransition(t *testing.T, f *ledgerFixture) {
	md := richMetadata()
	with := func(id ledger.DeliveryID, target ledger.Target, ceremony ledger.CeremonyID) {
		r := req(id, target)
		r.Ceremony = ceremony
		r.Metadata = md
		f.enqueue(r, t0)
	}
	with("processed", "host-1", "")
	with("failed", "host-1", "")
	with("released", "host-1", "")
	with("lapsed", "host-1", "")
	with("abandoned", "host-2", "")
	with("ceremony", "host-2", "cer-1")
	with("followed", "host-3", "")

	leased := map[ledger.DeliveryID]ledger.Lease{}
	res := f.lease(ledger.LeaseFilter{Targets: []ledger.Target{"host-1"}}, ownerA, t0, leaseFor, 10)
	require.Len(t, res.Leased, 4)
	for _, ld := range res.Leased {
		require.Equal(t, md, ld.Delivery.Metadata, "Lease returns the metadata of %s", ld.Delivery.ID)
		leased[ld.Delivery.ID] = ld.Lease
	}
	now := at(time.Second)
	if r, ok := f.l.(ledger.Renewer); ok {
		f.applied(f.get("processed"), now)(r.RenewLease(f.ctx, leased["processed"], now, leaseFor))
	}
	f.applied(f.get("processed"), now)(f.l.Acknowledge(f.ctx, leased["processed"], "seen", now))
	f.applied(f.get("processed"), now)(f.l.MarkProcessed(f.ctx, "processed", ownerA, ledger.FenceOf(1), "done", now))
	f.applied(f.get("abandoned"), now)(f.l.RecordActivation(f.ctx, "abandoned", ledger.Activation{Result: ledger.ActivationDelivered}, now))
	f.applied(f.get("failed"), now)(f.l.MarkFailed(f.ctx, leased["failed"], ledger.FailureReason{Message: "no", Permanent: true}, now))
	f.applied(f.get("released"), now)(f.l.Release(f.ctx, leased["released"], now))
	f.applied(f.get("abandoned"), now)(f.l.Abandon(f.ctx, "abandoned", ledger.Cause{Kind: ledger.CauseQueueBounded}, now))
	_, err := f.l.ExpireCeremony(f.ctx, "cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, now)
	require.NoError(t, err)
	_, err = f.l.Supersede(f.ctx, "host-3", "host-4", ledger.Follow, now)
	require.NoError(t, err)
	_, err = f.l.Expire(f.ctx, at(leaseFor+time.Second))
	require.NoError(t, err)

	f.requireState("processed", ledger.DeliveryStateProcessed)
	f.requireState("failed", ledger.DeliveryStateFailed)
	f.requireState("abandoned", ledger.DeliveryStateExpired)
	f.requireState("ceremony", ledger.DeliveryStateExpired)
	require.Equal(t, ledger.Target("host-4"), f.get("followed").Target)
	lapsed := f.requireState("lapsed", ledger.DeliveryStateOffered)
	require.NotNil(t, lapsed.LastFailure, "the lapsed lease is recorded")
	for _, d := range f.all() {
		require.Equal(t, md, d.Metadata, "%s (%s) keeps its metadata", d.ID, d.State)
	}
}
