package ledger

import (
	"context"
	"time"
)

// lingerKey is the context key of WithLinger.
type lingerKey struct{}

// linger is the value WithLinger puts on a context; its address names
// the caller.
type linger struct{ d time.Duration }

// WithLinger returns a copy of ctx that tells a store the calls made under
// it are in no hurry: they may wait up to d for calls of other callers to
// share their commit. A store that commits calls together (pgstore's group
// commit) then holds them back until another caller's call arrives, or d
// has passed, so that work coming at a steady rate is written in fewer
// transactions; a store that commits each call on its own ignores it, as
// every store may. The calls made under one WithLinger context (and the
// contexts derived from it) are one caller's: they do not keep each
// other company. No call without a linger waits for one that has it.
//
// dispatch's loops set it on the completions of a cycle that found less
// than a full batch (see dispatch.WithCompletionLinger): such a loop is
// about to go idle, so the wait costs latency, never throughput. d of
// zero or less is no linger.
func WithLinger(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, lingerKey{}, &linger{d: max(d, 0)})
}

// LingerFrom returns the linger WithLinger set on ctx, 0 when none, and
// the caller it names: equal for the contexts of one WithLinger call,
// different for two calls, nil when none.
func LingerFrom(ctx context.Context) (d time.Duration, caller any) {
	l, _ := ctx.Value(lingerKey{}).(*linger)
	if l == nil {
		return 0, nil
	}
	return l.d, l
}
