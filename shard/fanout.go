package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/leaseledger/ledger"
)

// ShardError is a failure of one shard inside a call that spans several.
// Calls that gather from every shard (Lease without a single target,
// Expire, the claims) still answer with what the other shards gave; they
// report the failed shards to the ErrorFunc and, when no shard answered,
// return the errors joined. errors.Is and errors.As see through it to the
// store's own error.
type ShardError struct {
	Shard int
	Err   error
}

// Error names the shard and the store's error.
func (e *ShardError) Error() string { return fmt.Sprintf("shard %d: %v", e.Shard, e.Err) }

// Unwrap returns the store's error.
func (e *ShardError) Unwrap() error { return e.Err }

// ErrorFunc is told about each shard that failed inside a call that
// answered from the others. It must be safe for concurrent use.
type ErrorFunc func(err *ShardError)

// fanOut calls f for each listed shard, concurrently when there are
// several (each shard is its own server: one round trip of latency, not
// len(idx)), and returns the errors by position in idx.
func fanOut(ctx context.Context, idx []int, f func(ctx context.Context, pos, shard int) error) []error {
	errs := make([]error, len(idx))
	if len(idx) == 0 {
		return errs
	}
	if len(idx) == 1 {
		errs[0] = wrapShard(idx[0], f(ctx, 0, idx[0]))
		return errs
	}
	var wg sync.WaitGroup
	last := len(idx) - 1
	for pos, i := range idx[:last] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[pos] = wrapShard(i, f(ctx, pos, i))
		}()
	}
	// The last shard's call runs here: one goroutine fewer per call.
	errs[last] = wrapShard(idx[last], f(ctx, last, idx[last]))
	wg.Wait()
	return errs
}

// gather asks each shard of idx for its part (fanOut) and returns the
// parts and the errors, both by position in idx.
func gather[R any](ctx context.Context, idx []int, ask func(ctx context.Context, shard int) (R, error)) ([]R, []error) {
	parts := make([]R, len(idx))
	errs := fanOut(ctx, idx, func(ctx context.Context, pos, i int) error {
		var err error
		parts[pos], err = ask(ctx, i)
		return err
	})
	return parts, errs
}

// scatter writes a batch over several shards: reqs[k] goes to the shard
// dest[k], each shard's part in one call of write, in the batch's order,
// the shards concurrently (fanOut). The answers come back in the batch's
// order. It needs every shard: one that fails fails the call (all),
// though the others' parts were written.
func scatter[Req, Res any](ctx context.Context, dest []int, reqs []Req, write func(ctx context.Context, shard int, part []Req) ([]Res, error)) ([]Res, error) {
	groups := map[int][]int{} // shard: positions in reqs
	for k, i := range dest {
		groups[i] = append(groups[i], k)
	}
	out := make([]Res, len(reqs))
	errs := fanOut(ctx, slices.Sorted(maps.Keys(groups)), func(ctx context.Context, _, i int) error {
		ks := groups[i]
		part := make([]Req, len(ks))
		for n, k := range ks {
			part[n] = reqs[k]
		}
		res, err := write(ctx, i, part)
		if err != nil {
			return err
		}
		for n, k := range ks {
			out[k] = res[n]
		}
		return nil
	})
	if err := all(errs); err != nil {
		return nil, err
	}
	return out, nil
}

// capability returns the shard s as the optional interface T, or
// ErrInvalid (on field) saying that a shard does not do what, for a
// call that needs every shard to.
func capability[T any](s any, field, what string) (T, error) {
	t, ok := s.(T)
	if !ok {
		return t, &ledger.InvalidError{Field: field, Reason: "a shard does not " + what}
	}
	return t, nil
}

// wrapShard names the shard in a store's failure; the caller's own
// mistakes (ErrInvalid) stay as the store returned them.
func wrapShard(i int, err error) error {
	if err == nil || isCallerError(err) {
		return err
	}
	var se *ShardError
	if errors.As(err, &se) {
		return err
	}
	return &ShardError{Shard: i, Err: err}
}

// partial decides what a gathering call returns: nil when at least one
// shard answered (the failures go to report), else every error joined.
// A validation error from any shard is the caller's mistake, not a
// shard's: it is returned as it is.
func partial(errs []error, report ErrorFunc) error {
	var failed []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if isCallerError(err) {
			return unwrapShard(err)
		}
		failed = append(failed, err)
	}
	if len(failed) == 0 {
		return nil
	}
	if len(failed) == len(errs) {
		return errors.Join(failed...)
	}
	if report != nil {
		for _, err := range failed {
			var se *ShardError
			if errors.As(err, &se) {
				report(se)
			}
		}
	}
	return nil
}

// all returns the first error of a call that needs every shard (a
// merged list, stats): its answer would be wrong without any one of
// them. A sweep returns it beside what the other shards changed: a
// validation error alone, else every shard's error joined.
func all(errs []error) error {
	for _, err := range errs {
		if err != nil && isCallerError(err) {
			return unwrapShard(err)
		}
	}
	return errors.Join(errs...)
}

func unwrapShard(err error) error {
	var se *ShardError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
