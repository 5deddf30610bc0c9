package console

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// This file draws the overview's chart: completions and failures per
// minute over the last hour, as an inline SVG whose every number is
// computed here. Its buckets are whole minutes of the clock (15:04:00 to
// 15:05:00), the last one the minute now is in, so that a bar means the
// same minute on every reload; a time axis labels every tenth minute. It counts the endings one bounded read returned (see
// ledger.EndedLister); when the read was cut by its limit, the minutes
// before the earliest ending it returned are drawn as unknown and the
// page says the view is partial.

// chartLimit is how many endings one overview reads: the bound of its
// query, whatever the number of records that ended in the hour.
const chartLimit = 2000

// Chart geometry, in SVG user units.
const (
	chartSpan    = time.Hour
	chartBuckets = 60
	chartWidth   = 720
	chartHeight  = 160
	chartBar     = chartWidth / chartBuckets
	// chartAxis is the height below the bars that holds the time axis.
	chartAxis = 18
)

// chartWindow returns the chart's hour at now: [since, until), whole
// minutes, until the end of the minute now is in.
func chartWindow(now time.Time) (since, until time.Time) {
	until = now.UTC().Truncate(time.Minute).Add(time.Minute)
	return until.Add(-chartSpan), until
}

// tickView is one label of the time axis.
type tickView struct {
	X     int
	Label string
}

// ending is one record's end as the chart counts it: when, for which
// target or provider, and whether it completed.
type ending struct {
	at        time.Time
	key       string
	completed bool
	// failed is true for an end in failure (Failed, DeadLettered);
	// neither completed nor failed is an expiry with a cause.
	failed bool
}

// chartView is the chart and its legend as the template prints them.
type chartView struct {
	Width, Height int
	// FullHeight is Height plus the axis; AxisY where its labels sit.
	FullHeight, AxisY int
	Ticks             []tickView
	Bars              []barView
	// Unknown is the part of the hour the read did not reach, when the
	// view is partial: X and Width of a shaded rectangle.
	Unknown          *barView
	Partial          bool
	PartialFrom      string
	Since, Until     string
	Counted          int
	Completed        int
	Failed, Expired  int
	Max              int
	Keys             []keyCount
	KeyName, KeyPath string
}

// barView is one minute of the chart: three stacked rectangles.
type barView struct {
	X, Width                             int
	CompletedY, CompletedH               int
	FailedY, FailedH, ExpiredY, ExpiredH int
	Title                                string
}

// keyCount is what ended for one target or provider in the hour.
type keyCount struct {
	Key                        string
	Completed, Failed, Expired int
}

// newChart counts ends (latest first, as the read returns them) into the
// minutes of the chart's hour at now (chartWindow). full says the read
// was cut by its limit.
func newChart(ends []ending, now time.Time, full bool) chartView {
	since, until := chartWindow(now)
	v := chartView{Width: chartWidth, Height: chartHeight, FullHeight: chartHeight + chartAxis, AxisY: chartHeight + chartAxis - 4,
		Since: fmtTime(since), Until: fmtTime(until), Counted: len(ends)}
	for i := range chartBuckets {
		if m := since.Add(time.Duration(i) * time.Minute); m.Minute()%10 == 0 {
			v.Ticks = append(v.Ticks, tickView{X: i * chartBar, Label: m.Format("15:04")})
		}
	}
	var done, failed, expired [chartBuckets]int
	keys := map[string]*keyCount{}
	for _, e := range ends {
		// Before since, the division would round a part of a minute
		// towards zero, into the first bucket: compare the times.
		if e.at.Before(since) || !e.at.Before(until) {
			continue
		}
		i := int(e.at.Sub(since) / (chartSpan / chartBuckets))
		k := keys[e.key]
		if k == nil {
			k = &keyCount{Key: e.key}
			keys[e.key] = k
		}
		switch {
		case e.completed:
			done[i]++
			k.Completed++
			v.Completed++
		case e.failed:
			failed[i]++
			k.Failed++
			v.Failed++
		default:
			expired[i]++
			k.Expired++
			v.Expired++
		}
	}
	for i := range chartBuckets {
		v.Max = max(v.Max, done[i]+failed[i]+expired[i])
	}
	scale := func(n int) int {
		if v.Max == 0 || n == 0 {
			return 0
		}
		return max(1, n*(chartHeight-10)/v.Max)
	}
	for i := range chartBuckets {
		if done[i]+failed[i]+expired[i] == 0 {
			continue
		}
		b := barView{X: i * chartBar, Width: chartBar - 1}
		b.CompletedH, b.FailedH, b.ExpiredH = scale(done[i]), scale(failed[i]), scale(expired[i])
		b.CompletedY = chartHeight - b.CompletedH
		b.FailedY = b.CompletedY - b.FailedH
		b.ExpiredY = b.FailedY - b.ExpiredH
		start := since.Add(time.Duration(i) * (chartSpan / chartBuckets))
		b.Title = fmt.Sprintf("%s: %d completed, %d failed, %d expired", start.UTC().Format("15:04"), done[i], failed[i], expired[i])
		v.Bars = append(v.Bars, b)
	}
	if full && len(ends) > 0 {
		earliest := ends[len(ends)-1].at
		v.Partial, v.PartialFrom = true, fmtTime(earliest)
		if i := int(earliest.Sub(since) / (chartSpan / chartBuckets)); i > 0 {
			v.Unknown = &barView{X: 0, Width: min(i, chartBuckets) * chartBar}
		}
	}
	for _, k := range keys {
		v.Keys = append(v.Keys, *k)
	}
	slices.SortFunc(v.Keys, func(a, b keyCount) int {
		return cmp.Or(cmp.Compare(b.Completed+b.Failed+b.Expired, a.Completed+a.Failed+a.Expired), cmp.Compare(a.Key, b.Key))
	})
	return v
}
