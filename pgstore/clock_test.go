package pgstore_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// quietLogger collects the store's warnings for a test to read.
func quietLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func TestDatabaseClockDecides(t *testing.T) {
	t.Parallel()
	logger, _ := quietLogger()
	owner := ledger.Owner{Agent: "host", Incarnation: "boot-1"}
	// The caller's clock runs four years ahead (t0 is in 2030): on its own
	// clock, a lease granted "now" for a minute is long expired by the
	// time it acknowledges at t0 plus an hour.
	for _, tc := range []struct {
		name    string
		dbClock bool
		want    ledger.Outcome
	}{
		{"caller clock", false, ledger.OutcomeLeaseExpired},
		{"database clock", true, ledger.OutcomeApplied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t, pgstore.WithDatabaseClock(tc.dbClock), pgstore.WithLogger(logger))
			ctx := testContext(t)
			_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0.Add(-time.Hour))
			require.NoError(t, err)
			wall := time.Now()
			res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
			require.NoError(t, err)
			if tc.dbClock {
				// Enqueued "an hour before 2030" on the caller's clock, but
				// stamped by the database, so it is offerable today.
				require.Len(t, res.Leased, 1)
				l := res.Leased[0].Lease
				assert.WithinDuration(t, wall, l.GrantedAt, time.Minute, "granted on the database's clock")
				assert.Equal(t, l.GrantedAt.Add(time.Minute), l.ExpiresAt)
			}
			require.Len(t, res.Leased, 1)
			ack, err := s.Acknowledge(ctx, res.Leased[0].Lease, "", t0.Add(time.Hour))
			require.NoError(t, err)
			assert.Equal(t, tc.want, ack.Outcome)
		})
	}
}

func TestSkewIsMeasuredAndLogged(t *testing.T) {
	t.Parallel()
	logger, buf := quietLogger()
	s, _ := newStore(t, pgstore.WithLogger(logger), pgstore.WithSkewThreshold(time.Minute))
	ctx := testContext(t)
	_, measured := s.ClockSkew()
	assert.False(t, measured)

	// A caller an hour ahead of the database: the first call samples the
	// skew and warns.
	_, err := s.Stats(ctx, ledger.StatsFilter{}, time.Now().Add(time.Hour))
	require.NoError(t, err)
	skew, measured := s.ClockSkew()
	require.True(t, measured)
	assert.InDelta(t, time.Hour.Seconds(), skew.Seconds(), 30)
	assert.Contains(t, buf.String(), "clock differs")
	assert.Contains(t, buf.String(), "op=stats")

	// Within the sampling period nothing more is measured or logged.
	buf.Reset()
	_, err = s.Stats(ctx, ledger.StatsFilter{}, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	skew, _ = s.ClockSkew()
	assert.Greater(t, skew, 59*time.Minute)
	assert.Empty(t, buf.String())
}

func TestDatabaseClockMeasuresEveryCall(t *testing.T) {
	t.Parallel()
	logger, buf := quietLogger()
	s, _ := newStore(t, pgstore.WithDatabaseClock(true), pgstore.WithLogger(logger))
	ctx := testContext(t)
	_, err := s.Expire(ctx, time.Now())
	require.NoError(t, err)
	skew, measured := s.ClockSkew()
	require.True(t, measured)
	assert.Less(t, skew.Abs(), 10*time.Second, "same machine, same clock")
	assert.Empty(t, buf.String(), "no warning below the threshold")

	_, err = s.Expire(ctx, time.Now().Add(-2*time.Hour))
	require.NoError(t, err)
	skew, _ = s.ClockSkew()
	assert.Less(t, skew, -time.Hour, "measured again on the next call")
	assert.Contains(t, buf.String(), "database_clock=true")
}

func TestClockOptionsAreValidated(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]pgstore.Option{
		"nil logger":     pgstore.WithLogger(nil),
		"zero threshold": pgstore.WithSkewThreshold(0),
		"negative":       pgstore.WithSkewThreshold(-time.Second),
	} {
		_, err := pgstore.New(nil, opt)
		assert.ErrorIs(t, err, ledger.ErrInvalid, name)
	}
}

func TestWithoutSkewCheckNeitherSamplesNorWarns(t *testing.T) {
	t.Parallel()
	logger, buf := quietLogger()
	s, _ := newStore(t, pgstore.WithLogger(logger), pgstore.WithoutSkewCheck())
	ctx := testContext(t)
	// Four years ahead of the database, call after call.
	for i := range 3 {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(string(rune('a' + i))), Target: "host"}, t0)
		require.NoError(t, err)
		_, err = s.Expire(ctx, t0)
		require.NoError(t, err)
	}
	_, measured := s.ClockSkew()
	assert.False(t, measured, "nothing is measured")
	assert.Empty(t, buf.String(), "nothing is logged")
}
