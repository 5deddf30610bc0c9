package ledger

// This file is the bounded queue: the caller the delivery seed names for
// Abandon ("the thing keeping a queue bounded"). A store configured with
// a bound for a target keeps that target's queue, its Offered and Leased
// deliveries, at or below the bound: an Enqueue (or EnqueueBatch, or
// Redrive) that takes the queue over it abandons the target's oldest
// Offered deliveries, in the order Lease hands them out, ending each as
// Expired with cause CauseQueueBounded in the same transaction, and says
// so in DeliveryResult.Abandoned. The new delivery is one of the
// candidates: when everything older is leased, it is the one abandoned,
// and its end stays readable like any other.
//
// The decisions behind it:
//
//   - A store option, not a field on the request. A bound belongs to the
//     queue, not to one item: producers that disagreed on it would make
//     it mean nothing, and it must not change an item's content (Enqueue
//     compares content for Repeated). Both stores take WithQueueBound for
//     every target and WithTargetQueueBound to override it for one; every
//     process writing to a target must configure the same bound for it.
//   - The queue is the Offered and Leased deliveries. Acknowledged work
//     has been received by its host and only waits for MarkProcessed,
//     which its acknowledgement deadline already bounds in time; only
//     Offered work is abandoned, since a holder is working on a Leased
//     one.
//   - Only the calls that add a new delivery to a target enforce its
//     bound. A Follow supersession moves work without it; the next
//     enqueue for the replacement brings its queue back under the bound,
//     at most MaxLimit abandoned per call (storekit.QueueOverflow).
//   - The cost when no bound applies is nothing: a store without bounds
//     runs exactly the enqueue it ran before. With one, pgstore serialises
//     the enqueues of a bounded target for their transaction, counts at
//     most bound+MaxLimit entries of the index of the target's queue and
//     reads its oldest Offered rows from the same index, never the
//     target's ended rows.

// QueueBounds is a store's bounds on its targets' queues (see the file
// comment of bound.go for the rule).
type QueueBounds struct {
	// Default bounds every target without an override; 0 means none.
	Default int
	// Targets overrides Default for the targets it names; 0 exempts one.
	Targets map[Target]int
}

// For returns the bound of target t; 0 means unbounded.
func (b QueueBounds) For(t Target) int {
	if n, ok := b.Targets[t]; ok {
		return n
	}
	return b.Default
}

// Any reports whether any target is bounded. A store checks it first, so
// that an unbounded store pays nothing per call.
func (b QueueBounds) Any() bool {
	if b.Default > 0 {
		return true
	}
	for _, n := range b.Targets {
		if n > 0 {
			return true
		}
	}
	return false
}

// Validate checks every bound: 0 to MaxQueueBound, for valid targets.
func (b QueueBounds) Validate() error {
	if b.Default < 0 || b.Default > MaxQueueBound {
		return invalid("queue bound", "must be between 0 and %d, got %d", MaxQueueBound, b.Default)
	}
	for t, n := range b.Targets {
		if err := validateName("queue bound target", string(t)); err != nil {
			return err
		}
		if n < 0 || n > MaxQueueBound {
			return invalid("queue bound", "must be between 0 and %d, got %d for target %q", MaxQueueBound, n, t)
		}
	}
	return nil
}

// With returns a copy of b with target t bounded by n, sharing no map
// with b.
func (b QueueBounds) With(t Target, n int) QueueBounds {
	m := make(map[Target]int, len(b.Targets)+1)
	for k, v := range b.Targets {
		m[k] = v
	}
	m[t] = n
	b.Targets = m
	return b
}
