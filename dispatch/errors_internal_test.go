package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

func TestEmissionErrorCodeAndMessage(t *testing.T) {
	base := errors.New("550 mailbox does not exist")
	for name, tc := range map[string]struct {
		err  error
		want ledger.EmissionError
	}{
		"plain":     {base, ledger.EmissionError{Code: CodeError, Message: base.Error()}},
		"permanent": {Permanent(base), ledger.EmissionError{Code: CodePermanent, Message: base.Error()}},
		"wrapped permanent": {fmt.Errorf("send: %w", Permanent(base)),
			ledger.EmissionError{Code: CodePermanent, Message: "send: " + base.Error()}},
		"coded":               {Coded("550", base), ledger.EmissionError{Code: "550", Message: base.Error()}},
		"coded permanent":     {Coded("550", Permanent(base)), ledger.EmissionError{Code: "550", Message: base.Error()}},
		"permanent coded":     {Permanent(Coded("550", base)), ledger.EmissionError{Code: "550", Message: base.Error()}},
		"empty code":          {Coded("", base), ledger.EmissionError{Code: CodeError, Message: base.Error()}},
		"code made a name":    {Coded("5\n50", base), ledger.EmissionError{Code: "5?50", Message: base.Error()}},
		"invisible replaced":  {Coded("4\u200b22", base), ledger.EmissionError{Code: "4?22", Message: base.Error()}},
		"timeout wins":        {fmt.Errorf("%w (emitter returned: %w)", ErrEmitTimeout, Coded("408", base)), ledger.EmissionError{Code: CodeTimeout}},
		"panic wins":          {&PanicError{Value: Coded("x", base)}, ledger.EmissionError{Code: CodePanic}},
		"shutdown wins":       {fmt.Errorf("%w: %w", ErrShutdown, Coded("x", base)), ledger.EmissionError{Code: CodeShutdown}},
		"claim lost wins":     {fmt.Errorf("%w: %w", ErrClaimLost, Coded("x", base)), ledger.EmissionError{Code: CodeClaimLost}},
		"long code truncated": {Coded(strings.Repeat("c", 300), base), ledger.EmissionError{Code: strings.Repeat("c", ledger.MaxNameBytes), Message: base.Error()}},
	} {
		got := emissionError(tc.err)
		assert.Equal(t, tc.want.Code, got.Code, name)
		if tc.want.Message != "" {
			assert.Equal(t, tc.want.Message, got.Message, name)
		}
		assert.NotContains(t, got.Message, "permanent:", "%s: the code says permanent; the message does not repeat it", name)
		assert.NoError(t, storekit.ValidateEmissionError(got), name)
	}
	assert.NoError(t, Coded("x", nil))
}

func TestErrorBackoffGrowsWithJitterAndStaysBounded(t *testing.T) {
	const base, limit = time.Second, 30 * time.Second
	step := base
	for n := 1; n <= 40; n++ {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := errorBackoff(n, base, limit)
			assert.GreaterOrEqual(t, d, step/2, "failure %d", n)
			assert.LessOrEqual(t, d, step, "failure %d", n)
			seen[d] = true
		}
		// Loops that failed together must not retry together: fifty
		// draws from half a second or more of nanoseconds all alike
		// would mean no jitter.
		assert.Greater(t, len(seen), 1, "failure %d: the wait is jittered", n)
		step = min(2*step, limit)
	}
	assert.Equal(t, time.Duration(1), errorBackoff(3, 1, 1), "a wait too short to split is kept whole")
	assert.LessOrEqual(t, errorBackoff(1<<40, time.Hour, time.Hour), time.Hour, "no overflow")
	var logged []int
	for n := 1; n <= 100; n++ {
		if worthLogging(n) {
			logged = append(logged, n)
		}
	}
	assert.Equal(t, []int{1, 2, 4, 8, 16, 32, 64}, logged)
	assert.NoError(t, (&health{}).ready(context.Background(), func(context.Context) error { return ledger.ErrNotFound }),
		"a probe that finds nothing is a store that answers")
}

// TestSweepWaitHasJitter: a Sweeper waits its interval plus up to a tenth,
// drawn anew every time, so that sweepers started together do not
// contend for their leads in step.
func TestSweepWaitHasJitter(t *testing.T) {
	var waits []time.Duration
	c := defaultCommon()
	c.afterFunc = func(d time.Duration, f func()) func() bool {
		waits = append(waits, d)
		f()
		return func() bool { return false }
	}
	s := &Sweeper{cfg: defaultSweeperConfig(c, "h")}
	seen := map[time.Duration]bool{}
	for range 50 {
		require.True(t, s.waitInterval(context.Background()))
	}
	require.Len(t, waits, 50)
	for _, d := range waits {
		assert.GreaterOrEqual(t, d, DefaultSweepInterval)
		assert.Less(t, d, DefaultSweepInterval+DefaultSweepInterval/10)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1, "the wait is jittered")
}
