package ledger

import (
	"hash/fnv"
	"time"
)

// Policy is a delivery's retry policy and acknowledgement window. It is
// stored on the record, so a store-level change of defaults never alters
// work already enqueued.
//
// A zero field means "the store's default" at Enqueue; the record holds the
// resolved values, and Enqueue compares resolved policies when it decides
// between OutcomeRepeated and OutcomeConflict.
type Policy struct {
	// MaxAttempts is how many leases a delivery may be granted before it
	// fails for good. Every grant counts; Release and a Follow supersession
	// give the attempt back.
	MaxAttempts int `json:"max_attempts"`
	// BackoffBase scales the delay after a failed attempt: after the n-th
	// attempt the delay is BackoffBase·2^(n-1), capped at BackoffMax, of
	// which a jittered half is taken off (see Backoff), so the first retry
	// waits between half of BackoffBase and all of it.
	BackoffBase time.Duration `json:"backoff_base_ns"`
	// BackoffMax caps the backoff.
	BackoffMax time.Duration `json:"backoff_max_ns"`
	// AckWindow is how long an acknowledged delivery may wait for
	// MarkProcessed before Expire ends it with CauseAcknowledgementLapsed.
	AckWindow time.Duration `json:"ack_window_ns"`
}

// DefaultPolicy returns the policy stores use when no default is
// configured: 5 attempts, backoff from 1 s capped at 5 min, a 5 min
// acknowledgement window. It is a function so that no caller can change
// the default for everyone else.
func DefaultPolicy() Policy {
	return Policy{
		MaxAttempts: 5,
		BackoffBase: time.Second,
		BackoffMax:  5 * time.Minute,
		AckWindow:   5 * time.Minute,
	}
}

// Resolve fills p's zero fields from defaults and normalises the durations
// to microseconds, the precision both stores keep.
func (p Policy) Resolve(defaults Policy) Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = defaults.MaxAttempts
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = defaults.BackoffBase
	}
	if p.BackoffMax == 0 {
		p.BackoffMax = defaults.BackoffMax
	}
	if p.AckWindow == 0 {
		p.AckWindow = defaults.AckWindow
	}
	p.BackoffBase = p.BackoffBase.Truncate(time.Microsecond)
	p.BackoffMax = p.BackoffMax.Truncate(time.Microsecond)
	p.AckWindow = p.AckWindow.Truncate(time.Microsecond)
	if p.BackoffMax < p.BackoffBase {
		p.BackoffMax = p.BackoffBase
	}
	return p
}

// Validate reports a malformed policy. Zero fields are allowed (they mean
// "default"); negative ones and ones past the limits are not. field prefixes
// the field names in the error ("policy", "default policy").
func (p Policy) Validate(field string) error {
	if p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit {
		return invalid(field+" max attempts", "must be between 1 and %d (0 for the default)", MaxAttemptsLimit)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"backoff base", p.BackoffBase}, {"backoff max", p.BackoffMax}, {"ack window", p.AckWindow}} {
		// Policies are kept at microsecond precision, so a positive value
		// under a microsecond would silently become "no delay".
		if d.v < 0 || (d.v > 0 && d.v < time.Microsecond) || d.v > MaxPolicyDuration {
			return invalid(field+" "+d.name, "must be 0 (the default) or between 1µs and %s", MaxPolicyDuration)
		}
	}
	return nil
}

// Backoff returns the delay before the next attempt after the attempt-th
// attempt of delivery id failed: exponential from BackoffBase, capped at
// BackoffMax, with "equal jitter" (half fixed, half spread).
//
// The jitter is drawn from a hash of the delivery ID and the attempt number,
// not from a random source: it still spreads retries of different
// deliveries apart, and it keeps the state machine a pure function, so both
// stores compute the same AvailableAt for the same calls.
func (p Policy) Backoff(id DeliveryID, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	// Double at most 62 times: past that a positive duration has overflowed
	// or reached the cap, and a huge attempt number must not loop for ever.
	d := p.BackoffBase
	for i := 1; i < attempt && i < 63 && d > 0 && d < p.BackoffMax; i++ {
		d *= 2
	}
	if d > p.BackoffMax || d < 0 {
		d = p.BackoffMax
	}
	if d < 0 {
		d = 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{byte(attempt), byte(attempt >> 8)})
	half := d / 2
	var spread time.Duration
	if half > 0 {
		spread = time.Duration(h.Sum64() % uint64(half+1))
	}
	return (d - half + spread).Truncate(time.Microsecond)
}
