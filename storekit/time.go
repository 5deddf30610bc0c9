package storekit

import (
	"time"
)

// MinTime is the earliest time the API accepts as a now: the Unix epoch.
// Every time crossing the API is normalised to UTC and truncated to the
// microsecond (PostgreSQL's precision) and must lie in [MinTime(),
// MaxTime()], the range in which Unix nanoseconds fit an int64, so that
// adding any accepted duration can never overflow. Due times (a nextRetry,
// an AvailableAt) may lie further in the past; see ClampPast.
func MinTime() time.Time { return time.Unix(0, 0).UTC() }

// MaxTime is the latest time the API accepts, in April 2262.
func MaxTime() time.Time { return time.Unix(0, 1<<63-1).UTC().Truncate(time.Microsecond) }
