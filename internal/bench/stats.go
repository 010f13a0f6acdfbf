// Package bench measures a running Tupper daemon as a user meets it and
// writes what it found as a report: Markdown, a chart and the raw samples.
// `tupper bench` drives it.
package bench

import (
	"math"
	"slices"
)

// Summary is what a figure's samples say: their count, extremes, and the
// percentiles the report prints.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Summarize returns the summary of samples; the zero Summary when there are
// none. The samples are not reordered.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Summary{
		N:      len(s),
		Min:    s[0],
		Median: median(s),
		P95:    percentile(s, 95),
		P99:    percentile(s, 99),
		Max:    s[len(s)-1],
	}
}

// median is the middle of sorted, or the mean of its two middle values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// sample that at least p% of the samples do not exceed. With few samples it
// is the maximum, never a value no run produced.
func percentile(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}
