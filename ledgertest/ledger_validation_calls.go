package ledgertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// This file holds the rest of the validation table (ledger_validation.go)
// and the cancelled-context rule.

// badLimits returns malformed limits and page sizes by kind.
func badLimits() map[string]int {
	return map[string]int{"zero": 0, "negative": -1, "over max": ledger.MaxLimit + 1}
}

func abandonInvalidCases() []invalidCase {
	ab := func(ctx context.Context, l ledger.Ledger, id ledger.DeliveryID, c ledger.Cause, now time.Time) error {
		_, err := l.Abandon(ctx, id, c, now)
		return err
	}
	ok := ledger.Cause{Kind: ledger.CauseQueueBounded}
	return concat(
		nameCases("id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ab(ctx, l, ledger.DeliveryID(v), ok, at(time.Second))
		}),
		nameCases("cause kind", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ab(ctx, l, "v-offered", ledger.Cause{Kind: ledger.CauseKind(v)}, at(time.Second))
		}),
		textCases("cause detail", func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ab(ctx, l, "v-offered", ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: v}, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return ab(ctx, l, "v-offered", ok, now)
		}),
	)
}

func expireCeremonyInvalidCases() []invalidCase {
	ec := func(ctx context.Context, l ledger.Ledger, c ledger.CeremonyID, cause ledger.Cause, now time.Time) error {
		_, err := l.ExpireCeremony(ctx, c, cause, now)
		return err
	}
	ok := ledger.Cause{Kind: ledger.CauseCeremonyEnded}
	return concat(
		nameCases("ceremony", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ec(ctx, l, ledger.CeremonyID(v), ok, at(time.Second))
		}),
		nameCases("cause kind", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ec(ctx, l, "cer-1", ledger.Cause{Kind: ledger.CauseKind(v)}, at(time.Second))
		}),
		textCases("cause detail", func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return ec(ctx, l, "cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded, Detail: v}, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return ec(ctx, l, "cer-1", ok, now)
		}),
	)
}

func supersedeInvalidCases() []invalidCase {
	sup := func(ctx context.Context, l ledger.Ledger, prev, repl ledger.Target, mode ledger.FollowMode, now time.Time) error {
		_, err := l.Supersede(ctx, prev, repl, mode, now)
		return err
	}
	return concat(
		nameCases("previous", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return sup(ctx, l, ledger.Target(v), "host-2", ledger.Follow, at(time.Second))
		}),
		nameCases("replacement", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return sup(ctx, l, "host-1", ledger.Target(v), ledger.Follow, at(time.Second))
		}),
		nowCases(func(ctx context.Context, l ledger.Ledger, _ validationSeed, now time.Time) error {
			return sup(ctx, l, "host-1", "host-2", ledger.LeaveBehind, now)
		}),
		[]invalidCase{
			{"replacement/same as previous", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return sup(ctx, l, "host-1", "host-1", ledger.Follow, at(time.Second))
			}},
			{"mode/empty", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return sup(ctx, l, "host-1", "host-2", "", at(time.Second))
			}},
			{"mode/unknown", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return sup(ctx, l, "host-1", "host-2", "follow-everything", at(time.Second))
			}},
		},
	)
}

func getInvalidCases() []invalidCase {
	get := func(ctx context.Context, l ledger.Ledger, id ledger.DeliveryID) error {
		_, err := l.Get(ctx, id)
		return err
	}
	return append(
		nameCases("id", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return get(ctx, l, ledger.DeliveryID(v))
		}),
		invalidCase{"context/nil", func(_ context.Context, l ledger.Ledger, _ validationSeed) error {
			return get(nilContext(), l, "v-offered")
		}},
	)
}

func listInvalidCases() []invalidCase {
	list := func(ctx context.Context, l ledger.Ledger, q ledger.ListQuery) error {
		_, err := l.List(ctx, q)
		return err
	}
	cases := concat(
		nameCases("targets", false, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return list(ctx, l, ledger.ListQuery{Targets: []ledger.Target{ledger.Target(v)}, Limit: 10})
		}),
		nameCases("ceremony", true, func(ctx context.Context, l ledger.Ledger, _ validationSeed, v string) error {
			return list(ctx, l, ledger.ListQuery{Ceremony: ledger.CeremonyID(v), Limit: 10})
		}),
		[]invalidCase{
			{"states/unknown", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return list(ctx, l, ledger.ListQuery{States: []ledger.DeliveryState{ledger.DeliveryStateOffered, "pending"}, Limit: 10})
			}},
			{"states/empty", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return list(ctx, l, ledger.ListQuery{States: []ledger.DeliveryState{""}, Limit: 10})
			}},
			{"cursor/malformed", func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
				return list(ctx, l, ledger.ListQuery{Limit: 10, Cursor: "%%%"})
			}},
			{"context/nil", func(_ context.Context, l ledger.Ledger, _ validationSeed) error {
				return list(nilContext(), l, ledger.ListQuery{Limit: 10})
			}},
		},
	)
	for kind, n := range badLimits() {
		cases = append(cases, invalidCase{"limit/" + kind, func(ctx context.Context, l ledger.Ledger, _ validationSeed) error {
			return list(ctx, l, ledger.ListQuery{Limit: n})
		}})
	}
	return cases
}

// validationCancelledContext calls every method with well-formed arguments
// that would apply, under a context that is already cancelled: each must
// fail with an error matching context.Canceled and write nothing.
func validationCancelledContext(t *testing.T, f *ledgerFixture) {
	seed := f.seedValidation()
	later := at(24 * time.Hour) // the seed's lease and acknowledgement have run out
	calls := map[string]func(ctx context.Context, l ledger.Ledger) error{
		"Enqueue": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Enqueue(ctx, req("v-new", "host-1"), at(time.Second))
			return err
		},
		"EnqueueBatch": func(ctx context.Context, l ledger.Ledger) error {
			b, ok := l.(ledger.BatchEnqueuer)
			if !ok {
				return fmt.Errorf("%T does not implement ledger.BatchEnqueuer", l)
			}
			_, err := b.EnqueueBatch(ctx, []ledger.EnqueueRequest{req("v-new", "host-1")}, at(time.Second))
			return err
		},
		"Lease": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Lease(ctx, ledger.LeaseFilter{}, ownerB, at(time.Second), leaseFor, 10)
			return err
		},
		"Acknowledge": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Acknowledge(ctx, seed.leased, "", at(time.Second))
			return err
		},
		"MarkProcessed": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.MarkProcessed(ctx, "v-acked", ownerA, ledger.FenceOf(1), "done", at(time.Second))
			return err
		},
		"RecordActivation": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.RecordActivation(ctx, "v-offered", ledger.Activation{Result: ledger.ActivationDelivered}, at(time.Second))
			return err
		},
		"MarkFailed": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.MarkFailed(ctx, seed.leased, ledger.FailureReason{}, at(time.Second))
			return err
		},
		"Release": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Release(ctx, seed.leased, at(time.Second))
			return err
		},
		"Expire": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Expire(ctx, later)
			return err
		},
		"Abandon": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Abandon(ctx, "v-offered", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(time.Second))
			return err
		},
		"ExpireCeremony": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.ExpireCeremony(ctx, "cer-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at(time.Second))
			return err
		},
		"Supersede": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Supersede(ctx, "host-1", "host-2", ledger.Follow, at(time.Second))
			return err
		},
		"Get": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.Get(ctx, "v-offered")
			return err
		},
		"List": func(ctx context.Context, l ledger.Ledger) error {
			_, err := l.List(ctx, ledger.ListQuery{Limit: 10})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			g := f.with(t)
			before := g.all()
			err := call(cancelledContext(t), g.l)
			require.Error(t, err)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, before, g.all(), "a cancelled call writes nothing")
		})
	}
}
