package ledgertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testValidation checks that every method rejects malformed input with an
// *ledger.InvalidError before touching storage, and stops on a cancelled
// context, writing nothing either way.
//
// The cases of one method share a ledger: a rejected call writes nothing,
// so each case starts from the same records, and the snapshot taken after
// each case names the first one that wrote.
func testValidation(t *testing.T, newLedger NewLedgerFunc) {
	rules := make([]ledgerRule, 0, len(validationMethods())+1)
	for _, m := range validationMethods() {
		rules = append(rules, ledgerRule{m.name, func(t *testing.T, f *ledgerFixture) { runInvalidCases(t, f, m.cases) }})
	}
	rules = append(rules, ledgerRule{"CancelledContext", validationCancelledContext})
	runLedgerRules(t, newLedger, rules)
}

// validationSeed is what the validation cases work on: v-offered, v-acked
// (acknowledged by ownerA) and v-leased (ceremony cer-1, leased to ownerA
// under leased). A store that skipped validation would apply most cases.
type validationSeed struct {
	leased ledger.Lease
}

func (f *ledgerFixture) seedValidation() validationSeed {
	f.t.Helper()
	f.acknowledged("v-acked", "host-1", ownerA, t0)
	r := req("v-leased", "host-1")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	leased := f.leaseOne("v-leased", ownerA, t0)
	f.enqueue(req("v-offered", "host-1"), t0)
	return validationSeed{leased: leased}
}

// with returns a view of f that reports to t, for nested subtests.
func (f *ledgerFixture) with(t *testing.T) *ledgerFixture {
	return &ledgerFixture{t: t, l: f.l, ctx: t.Context()}
}

// invalidCase is one malformed call. ctx is the test's context; cases
// about the context itself ignore it.
type invalidCase struct {
	name string
	call func(ctx context.Context, l ledger.Ledger, s validationSeed) error
}

type validationMethod struct {
	name  string
	cases []invalidCase
}

func runInvalidCases(t *testing.T, f *ledgerFixture, cases []invalidCase) {
	seed := f.seedValidation()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := f.with(t)
			before := g.all()
			requireInvalid(t, c.call(g.ctx, g.l, seed))
			require.Equal(t, before, g.all(), "a rejected call writes nothing")
		})
	}
}

// badNames returns malformed names (IDs, targets, ceremonies, agents,
// incarnations, tokens, cause kinds, actions) by kind.
func badNames() map[string]string {
	return map[string]string{
		"empty": "", "oversize": strings.Repeat("n", ledger.MaxNameBytes+1), "invalid UTF-8": "a\xffb",
		"NUL": "a\x00b", "newline": "a\nb", "DEL": "a\x7fb", "C1 control": "a\u0085b",
		// Names that look like another name: format and invisible
		// characters are refused, so that look-alikes are one name.
		"right-to-left override": "x1\u202e", "zero-width space": "x1\u200b", "no-break space": "x\u00a01",
		"Hangul filler": "x1\u3164",
	}
}

// badTexts returns malformed free text by kind.
func badTexts() map[string]string {
	return map[string]string{
		"oversize": strings.Repeat("t", ledger.MaxTextBytes+1), "invalid UTF-8": "a\xc3(b", "NUL": "a\x00b",
	}
}

// badNows returns malformed now values by kind.
func badNows() map[string]time.Time {
	return map[string]time.Time{
		"zero": {}, "before MinTime": storekit.MinTime().Add(-time.Microsecond), "after MaxTime": storekit.MaxTime().Add(time.Microsecond),
		"year 1": time.Date(1, time.January, 1, 0, 0, 0, 1000, time.UTC),
	}
}

// nameCases returns one case per malformed name, built by call; optional
// names skip the empty one.
func nameCases(field string, optional bool, call func(ctx context.Context, l ledger.Ledger, s validationSeed, v string) error) []invalidCase {
	var out []invalidCase
	for kind, v := range badNames() {
		if optional && v == "" {
			continue
		}
		out = append(out, invalidCase{field + "/" + kind, func(ctx context.Context, l ledger.Ledger, s validationSeed) error { return call(ctx, l, s, v) }})
	}
	return out
}

func textCases(field string, call func(ctx context.Context, l ledger.Ledger, s validationSeed, v string) error) []invalidCase {
	var out []invalidCase
	for kind, v := range badTexts() {
		out = append(out, invalidCase{field + "/" + kind, func(ctx context.Context, l ledger.Ledger, s validationSeed) error { return call(ctx, l, s, v) }})
	}
	return out
}

// nowCases returns one case per malformed now, plus a nil context.
func nowCases(call func(ctx context.Context, l ledger.Ledger, s validationSeed, now time.Time) error) []invalidCase {
	var out []invalidCase
	for kind, v := range badNows() {
		out = append(out, invalidCase{"now/" + kind, func(ctx context.Context, l ledger.Ledger, s validationSeed) error { return call(ctx, l, s, v) }})
	}
	return append(out, invalidCase{"context/nil", func(_ context.Context, l ledger.Ledger, s validationSeed) error {
		return call(nilContext(), l, s, at(time.Second))
	}})
}

func concat(groups ...[]invalidCase) []invalidCase {
	var out []invalidCase
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func validationMethods() []validationMethod {
	return []validationMethod{
		{"Enqueue", enqueueInvalidCases()},
		{"EnqueueBatch", enqueueBatchInvalidCases()},
		{"Lease", leaseInvalidCases()},
		{"Acknowledge", leaseArgCases(func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, text string, now time.Time) error {
			_, err := l.Acknowledge(ctx, lease, text, now)
			return err
		}, "observation")},
		{"MarkProcessed", markProcessedInvalidCases()},
		{"RecordActivation", activationInvalidCases()},
		{"MarkFailed", leaseArgCases(func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, text string, now time.Time) error {
			_, err := l.MarkFailed(ctx, lease, ledger.FailureReason{Message: text}, now)
			return err
		}, "message")},
		{"Release", leaseArgCases(func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, _ string, now time.Time) error {
			_, err := l.Release(ctx, lease, now)
			return err
		}, "")},
		{"Expire", nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			_, err := l.Expire(ctx, now)
			return err
		})},
		{"Abandon", abandonInvalidCases()},
		{"ExpireCeremony", expireCeremonyInvalidCases()},
		{"Supersede", supersedeInvalidCases()},
		{"Get", getInvalidCases()},
		{"List", listInvalidCases()},
	}
}

func enqueueInvalidCases() []invalidCase {
	enq := func(ctx context.Context, l ledger.Ledger, r ledger.EnqueueRequest, now time.Time) error {
		_, err := l.Enqueue(ctx, r, now)
		return err
	}
	withReq := func(field string, change func(*ledger.EnqueueRequest)) invalidCase {
		return invalidCase{field, func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
			r := req("v-new", "host-1")
			change(&r)
			return enq(ctx, l, r, at(time.Second))
		}}
	}
	cases := concat(
		nameCases("id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return enq(ctx, l, req(ledger.DeliveryID(v), "host-1"), at(time.Second))
		}),
		nameCases("target", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return enq(ctx, l, req("v-new", ledger.Target(v)), at(time.Second))
		}),
		nameCases("ceremony", true, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			r := req("v-new", "host-1")
			r.Ceremony = ledger.CeremonyID(v)
			return enq(ctx, l, r, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return enq(ctx, l, req("v-new", "host-1"), now)
		}),
	)
	return append(append(cases,
		withReq("payload/oversize", func(r *ledger.EnqueueRequest) { r.Payload = make([]byte, ledger.DefaultMaxPayload+1) }),
		withReq("policy/max attempts negative", func(r *ledger.EnqueueRequest) { r.Policy.MaxAttempts = -1 }),
		withReq("policy/max attempts over limit", func(r *ledger.EnqueueRequest) { r.Policy.MaxAttempts = ledger.MaxAttemptsLimit + 1 }),
		withReq("policy/backoff base negative", func(r *ledger.EnqueueRequest) { r.Policy.BackoffBase = -time.Second }),
		withReq("policy/backoff max over limit", func(r *ledger.EnqueueRequest) {
			r.Policy.BackoffMax = ledger.MaxPolicyDuration + time.Microsecond
		}),
		withReq("policy/ack window negative", func(r *ledger.EnqueueRequest) { r.Policy.AckWindow = -time.Nanosecond }),
		withReq("policy/ack window over limit", func(r *ledger.EnqueueRequest) {
			r.Policy.AckWindow = ledger.MaxPolicyDuration + time.Microsecond
		}),
		withReq("available at/after MaxTime", func(r *ledger.EnqueueRequest) { r.AvailableAt = storekit.MaxTime().Add(time.Hour) }),
		withReq("available at/after MaxTime", func(r *ledger.EnqueueRequest) { r.AvailableAt = storekit.MaxTime().Add(time.Hour) }),
		// An existing ID does not skip validation.
		withReq("existing id with oversize payload", func(r *ledger.EnqueueRequest) {
			r.ID = "v-offered"
			r.Payload = make([]byte, ledger.DefaultMaxPayload+1)
		}),
		withReq("existing id with invalid metadata", func(r *ledger.EnqueueRequest) {
			r.ID = "v-offered"
			r.Metadata = ledger.Metadata{"k": "nul\x00"}
		}),
	), metadataCases(func(ctx context.Context, l ledger.Ledger, md ledger.Metadata) error {
		r := req("v-new", "host-1")
		r.Metadata = md
		return enq(ctx, l, r, at(time.Second))
	})...)
}

// badMetadata returns malformed metadata by name: every bound and every
// rule of storekit.ValidateMetadata broken once.
func badMetadata() map[string]ledger.Metadata {
	tooMany := ledger.Metadata{}
	for i := range ledger.MaxMetadataEntries + 1 {
		tooMany[fmt.Sprintf("key-%02d", i)] = "v"
	}
	return map[string]ledger.Metadata{
		"too many keys":       tooMany,
		"too many bytes":      {"k": strings.Repeat("v", ledger.MaxMetadataBytes)},
		"empty key":           {"": "v"},
		"oversize key":        {strings.Repeat("k", ledger.MaxNameBytes+1): "v"},
		"control in key":      {"a\nb": "v"},
		"invalid UTF-8 key":   {"a\xffb": "v"},
		"NUL in value":        {"k": "a\x00b"},
		"invalid UTF-8 value": {"k": "a\xffb"},
	}
}

// metadataCases returns one case per malformed metadata for a call that
// takes it.
func metadataCases(call func(ctx context.Context, l ledger.Ledger, md ledger.Metadata) error) []invalidCase {
	var out []invalidCase
	bad := badMetadata()
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		md := bad[name]
		out = append(out, invalidCase{"metadata/" + name, func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
			return call(ctx, l, md)
		}})
	}
	return out
}

func enqueueBatchInvalidCases() []invalidCase {
	batch := func(ctx context.Context, l ledger.Ledger, reqs []ledger.EnqueueRequest, now time.Time) error {
		b, ok := l.(ledger.BatchEnqueuer)
		if !ok {
			return fmt.Errorf("%T does not implement ledger.BatchEnqueuer", l)
		}
		_, err := b.EnqueueBatch(ctx, reqs, now)
		return err
	}
	var tooMany []ledger.EnqueueRequest
	for _, id := range manyIDs("v-batch", ledger.MaxLimit+1) {
		tooMany = append(tooMany, req(id, "host-1"))
	}
	return concat(
		[]invalidCase{
			{"batch/empty", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return batch(ctx, l, nil, at(time.Second))
			}},
			{"batch/over max", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return batch(ctx, l, tooMany, at(time.Second))
			}},
		},
		nameCases("item id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return batch(ctx, l, []ledger.EnqueueRequest{req("v-new-1", "host-1"), req(ledger.DeliveryID(v), "host-1")}, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return batch(ctx, l, []ledger.EnqueueRequest{req("v-new-1", "host-1")}, now)
		}),
		metadataCases(func(ctx context.Context, l ledger.Ledger, md ledger.Metadata) error {
			bad := req("v-new-2", "host-1")
			bad.Metadata = md
			return batch(ctx, l, []ledger.EnqueueRequest{req("v-new-1", "host-1"), bad}, at(time.Second))
		}),
	)
}

func leaseInvalidCases() []invalidCase {
	lease := func(ctx context.Context, l ledger.Ledger, filter ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) error {
		_, err := l.Lease(ctx, filter, o, now, d, limit)
		return err
	}
	cases := concat(
		nameCases("filter target", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return lease(ctx, l, ledger.LeaseFilter{Targets: []ledger.Target{"host-1", ledger.Target(v)}}, ownerB, at(time.Second), leaseFor, 10)
		}),
		nameCases("filter ceremony", true, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return lease(ctx, l, ledger.LeaseFilter{Ceremony: ledger.CeremonyID(v)}, ownerB, at(time.Second), leaseFor, 10)
		}),
		nameCases("owner agent", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return lease(ctx, l, ledger.LeaseFilter{}, ledger.Owner{Agent: v, Incarnation: "boot-1"}, at(time.Second), leaseFor, 10)
		}),
		nameCases("owner incarnation", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			// An empty incarnation of ownerA's agent must not take its leases back.
			return lease(ctx, l, ledger.LeaseFilter{}, ledger.Owner{Agent: ownerA.Agent, Incarnation: v}, at(time.Second), leaseFor, 10)
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return lease(ctx, l, ledger.LeaseFilter{}, ownerB, now, leaseFor, 10)
		}),
	)
	tooManyTargets := make([]ledger.Target, ledger.MaxLimit+1)
	for i := range tooManyTargets {
		tooManyTargets[i] = "host-1"
	}
	cases = append(cases, invalidCase{"filter targets/over max", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
		return lease(ctx, l, ledger.LeaseFilter{Targets: tooManyTargets}, ownerB, at(time.Second), leaseFor, 10)
	}})
	for kind, d := range map[string]time.Duration{
		"zero": 0, "negative": -time.Second, "sub-microsecond": 999, "over max": ledger.MaxLeaseDuration + time.Microsecond,
	} {
		cases = append(cases, invalidCase{"duration/" + kind, func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
			return lease(ctx, l, ledger.LeaseFilter{}, ownerB, at(time.Second), d, 10)
		}})
	}
	for kind, n := range badLimits() {
		cases = append(cases, invalidCase{"limit/" + kind, func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
			return lease(ctx, l, ledger.LeaseFilter{}, ownerB, at(time.Second), leaseFor, n)
		}})
	}
	return cases
}

// leaseArgCases covers the methods that take a lease back: a malformed
// lease, malformed text (unless textField is empty) and malformed now.
// Every case uses the seed's live lease, so a store that skipped
// validation would apply the call.
func leaseArgCases(call func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, text string, now time.Time) error, textField string) []invalidCase {
	withLease := func(change func(*ledger.Lease)) func(ctx context.Context, l ledger.Ledger, s validationSeed) error {
		return func(ctx context.Context, l ledger.Ledger, s validationSeed) error {
			lease := s.leased
			change(&lease)
			return call(ctx, l, lease, "", at(time.Second))
		}
	}
	cases := concat(
		nameCases("lease delivery id", false, func(ctx context.Context, l ledger.Ledger, s validationSeed, v string) error {
			return withLease(func(x *ledger.Lease) { x.DeliveryID = ledger.DeliveryID(v) })(ctx, l, s)
		}),
		nameCases("lease token", false, func(ctx context.Context, l ledger.Ledger, s validationSeed, v string) error {
			return withLease(func(x *ledger.Lease) { x.Token = ledger.Token(v) })(ctx, l, s)
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, s validationSeed, now time.Time) error {
			return call(ctx, l, s.leased, "", now)
		}),
	)
	if textField != "" {
		cases = append(cases, textCases(textField, func(ctx context.Context, l ledger.Ledger, s validationSeed, v string) error {
			return call(ctx, l, s.leased, v, at(time.Second))
		})...)
	}
	return cases
}

func markProcessedInvalidCases() []invalidCase {
	mp := func(ctx context.Context, l ledger.Ledger, id ledger.DeliveryID, o ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) error {
		_, err := l.MarkProcessed(ctx, id, o, fence, action, now)
		return err
	}
	return concat(
		nameCases("id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return mp(ctx, l, ledger.DeliveryID(v), ownerA, nil, "done", at(time.Second))
		}),
		nameCases("owner agent", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return mp(ctx, l, "v-acked", ledger.Owner{Agent: v, Incarnation: ownerA.Incarnation}, nil, "done", at(time.Second))
		}),
		nameCases("owner incarnation", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return mp(ctx, l, "v-acked", ledger.Owner{Agent: ownerA.Agent, Incarnation: v}, nil, "done", at(time.Second))
		}),
		nameCases("action", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return mp(ctx, l, "v-acked", ownerA, nil, ledger.ActionRef(v), at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return mp(ctx, l, "v-acked", ownerA, nil, "done", now)
		}),
		[]invalidCase{
			{"owner/zero", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return mp(ctx, l, "v-acked", ledger.Owner{}, nil, "done", at(time.Second))
			}},
			{"fence/negative", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return mp(ctx, l, "v-acked", ownerA, ledger.FenceOf(-1), "done", at(time.Second))
			}},
		},
	)
}

func activationInvalidCases() []invalidCase {
	ra := func(ctx context.Context, l ledger.Ledger, id ledger.DeliveryID, a ledger.Activation, now time.Time) error {
		_, err := l.RecordActivation(ctx, id, a, now)
		return err
	}
	ok := ledger.Activation{Result: ledger.ActivationDelivered}
	return concat(
		nameCases("id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ra(ctx, l, ledger.DeliveryID(v), ok, at(time.Second))
		}),
		textCases("detail", func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ra(ctx, l, "v-offered", ledger.Activation{Result: ledger.ActivationFailed, Detail: v}, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return ra(ctx, l, "v-offered", ok, now)
		}),
		[]invalidCase{
			{"result/empty", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return ra(ctx, l, "v-offered", ledger.Activation{}, at(time.Second))
			}},
			{"result/unknown", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return ra(ctx, l, "v-offered", ledger.Activation{Result: "woken-up"}, at(time.Second))
			}},
		},
	)
}
