package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// spacer runs space with a wait the test ends by hand, so that what
// arrives during an interval is under the test's control, not the clock's.
type spacer struct {
	in    chan struct{}
	out   chan struct{}
	waits chan time.Duration // space asked to wait this long
	goOn  chan bool          // the wait's answer
}

func startSpacer(every time.Duration) *spacer {
	sp := &spacer{in: make(chan struct{}, 1), out: make(chan struct{}, 1), waits: make(chan time.Duration), goOn: make(chan bool)}
	go space(sp.in, sp.out, every, func(d time.Duration) bool {
		sp.waits <- d
		return <-sp.goOn
	})
	return sp
}

// pending reports whether a value waits in out, without blocking.
func pending(out <-chan struct{}) bool {
	select {
	case _, ok := <-out:
		return ok
	default:
		return false
	}
}

func TestSpaceSendsAtOnceThenOnceAnInterval(t *testing.T) {
	sp := startSpacer(10 * time.Millisecond)

	// The first notification after a quiet spell goes on at once, and the
	// interval starts.
	signal(sp.in)
	require.Equal(t, 10*time.Millisecond, <-sp.waits)
	require.True(t, pending(sp.out), "the first notification wakes at once")

	// Notifications during the interval wake nobody yet...
	for range 20 {
		signal(sp.in)
	}
	require.False(t, pending(sp.out), "no value within the interval")

	// ...and go on as one value when it ends.
	sp.goOn <- true
	require.Equal(t, 10*time.Millisecond, <-sp.waits)
	require.True(t, pending(sp.out), "what the interval coalesced goes on at its end")
	require.False(t, pending(sp.out), "as one value")

	// A quiet interval sends nothing at its end; the next notification
	// goes on at once.
	sp.goOn <- true
	require.False(t, pending(sp.out))
	signal(sp.in)
	require.Equal(t, 10*time.Millisecond, <-sp.waits)
	require.True(t, pending(sp.out))

	// When the listener stops, out is closed once in is.
	sp.goOn <- false
	close(sp.in)
	_, ok := <-sp.out
	require.False(t, ok, "out is closed")
}

func TestSpaceWithoutIntervalPassesEveryValue(t *testing.T) {
	in, out := make(chan struct{}, 1), make(chan struct{}, 1)
	go space(in, out, 0, func(time.Duration) bool { panic("no wait without an interval") })
	for range 3 {
		signal(in)
		_, ok := <-out
		require.True(t, ok)
	}
	close(in)
	_, ok := <-out
	require.False(t, ok)
}

func TestWithWakeIntervalBounds(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, MaxWakeInterval + 1} {
		var c config
		WithWakeInterval(d)(&c)
		require.True(t, errors.Is(c.err, ledger.ErrInvalid), "%v is refused", d)
	}
	for _, d := range []time.Duration{0, DefaultWakeInterval, MaxWakeInterval} {
		var c config
		WithWakeInterval(d)(&c)
		require.NoError(t, c.err)
		require.Equal(t, d, c.wakeInterval)
	}
}
