package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChartCountsEachMinute(t *testing.T) {
	until := consoleNow
	ends := []ending{
		{at: until.Add(-30 * time.Second), key: "a", completed: true},
		{at: until.Add(-40 * time.Second), key: "a", failed: true},
		{at: until.Add(-50 * time.Second), key: "b"},
		{at: until.Add(-59*time.Minute - 30*time.Second), key: "b", completed: true},
		{at: until.Add(-2 * time.Hour), key: "c", completed: true}, // outside the hour
	}
	v := newChart(ends, until, false)
	assert.Equal(t, 2, v.Completed)
	assert.Equal(t, 1, v.Failed)
	assert.Equal(t, 1, v.Expired)
	assert.Equal(t, 3, v.Max)
	require.Len(t, v.Bars, 2)
	first, last := v.Bars[0], v.Bars[1]
	assert.Equal(t, 0, first.X)
	assert.Equal(t, (chartBuckets-1)*chartBar, last.X)
	assert.Equal(t, chartHeight, last.CompletedY+last.CompletedH, "bars stand on the bottom")
	assert.Equal(t, last.CompletedY, last.FailedY+last.FailedH, "failures stack on completions")
	assert.Equal(t, last.FailedY, last.ExpiredY+last.ExpiredH, "expiries stack on failures")
	assert.Equal(t, "09:29: 1 completed, 1 failed, 1 expired", last.Title)
	assert.False(t, v.Partial)
	assert.Nil(t, v.Unknown)
	require.Len(t, v.Keys, 2)
	assert.Equal(t, keyCount{Key: "a", Completed: 1, Failed: 1}, v.Keys[0])
}

func TestAChartCutByItsLimitSaysItIsPartial(t *testing.T) {
	until := consoleNow
	ends := []ending{
		{at: until.Add(-time.Minute), completed: true},
		{at: until.Add(-20 * time.Minute), completed: true},
	}
	v := newChart(ends, until, true)
	assert.True(t, v.Partial)
	assert.Equal(t, fmtTime(until.Add(-20*time.Minute)), v.PartialFrom)
	require.NotNil(t, v.Unknown)
	assert.Equal(t, 40*chartBar, v.Unknown.Width, "the forty minutes before the earliest ending read are unknown")
}
