package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChartCountsEachMinute(t *testing.T) {
	// Twenty seconds into 09:30: the chart's minutes are 08:31 to 09:30,
	// whole minutes of the clock, the last one the minute now is in.
	now := consoleNow.Add(20 * time.Second)
	require.Equal(t, "09:30:00", consoleNow.Format("15:04:05"))
	ends := []ending{
		{at: consoleNow.Add(5 * time.Second), key: "a", completed: true},                  // 09:30:05, this minute
		{at: now.Add(-30 * time.Second), key: "a", completed: true},                       // 09:29:50
		{at: now.Add(-40 * time.Second), key: "a", failed: true},                          // 09:29:40
		{at: now.Add(-50 * time.Second), key: "b"},                                        // 09:29:30
		{at: consoleNow.Add(-59*time.Minute + 10*time.Second), key: "b", completed: true}, // 08:31:10
		{at: consoleNow.Add(-59*time.Minute - 10*time.Second), key: "c", completed: true}, // 08:30:50, before the hour
	}
	v := newChart(ends, now, false)
	assert.Equal(t, 3, v.Completed)
	assert.Equal(t, 1, v.Failed)
	assert.Equal(t, 1, v.Expired)
	assert.Equal(t, 3, v.Max)
	require.Len(t, v.Bars, 3)
	first, prev, last := v.Bars[0], v.Bars[1], v.Bars[2]
	assert.Equal(t, 0, first.X)
	assert.Equal(t, "08:31: 1 completed, 0 failed, 0 expired", first.Title)
	assert.Equal(t, (chartBuckets-2)*chartBar, prev.X)
	assert.Equal(t, "09:29: 1 completed, 1 failed, 1 expired", prev.Title)
	assert.Equal(t, (chartBuckets-1)*chartBar, last.X)
	assert.Equal(t, "09:30: 1 completed, 0 failed, 0 expired", last.Title)
	assert.Equal(t, chartHeight, prev.CompletedY+prev.CompletedH, "bars stand on the bottom")
	assert.Equal(t, prev.CompletedY, prev.FailedY+prev.FailedH, "failures stack on completions")
	assert.Equal(t, prev.FailedY, prev.ExpiredY+prev.ExpiredH, "expiries stack on failures")
	assert.Equal(t, "2030-01-01 08:31:00Z", v.Since)
	assert.Equal(t, "2030-01-01 09:31:00Z", v.Until)
	assert.False(t, v.Partial)
	assert.Nil(t, v.Unknown)
	require.Len(t, v.Keys, 2)
	assert.Equal(t, keyCount{Key: "a", Completed: 2, Failed: 1}, v.Keys[0])

	// The axis labels every tenth minute of the clock, under its bar.
	assert.Equal(t, []tickView{{9 * chartBar, "08:40"}, {19 * chartBar, "08:50"}, {29 * chartBar, "09:00"},
		{39 * chartBar, "09:10"}, {49 * chartBar, "09:20"}, {59 * chartBar, "09:30"}}, v.Ticks)

	// A reload later in the same minute draws the same bars.
	again := newChart(ends, consoleNow.Add(50*time.Second), false)
	assert.Equal(t, v.Bars, again.Bars)
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
	// The hour runs from 08:31 (now is 09:30:00, the last minute 09:30):
	// the 39 minutes before 09:10 are unknown.
	assert.Equal(t, 39*chartBar, v.Unknown.Width, "the minutes before the earliest ending read are unknown")
}
