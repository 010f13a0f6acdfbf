package bench

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	twenty := make([]float64, 20)
	for i := range twenty {
		twenty[i] = float64(20 - i) // 20 … 1, unsorted
	}
	hundredOne := make([]float64, 101)
	for i := range hundredOne {
		hundredOne[i] = float64(i)
	}
	tests := []struct {
		name    string
		samples []float64
		want    Summary
	}{
		{name: "none", samples: nil, want: Summary{}},
		{name: "one", samples: []float64{7}, want: Summary{N: 1, Min: 7, Median: 7, P95: 7, P99: 7, Max: 7}},
		{name: "odd", samples: []float64{3, 1, 2}, want: Summary{N: 3, Min: 1, Median: 2, P95: 3, P99: 3, Max: 3}},
		{name: "even median is the mean of the middle two", samples: []float64{4, 1, 3, 2}, want: Summary{N: 4, Min: 1, Median: 2.5, P95: 4, P99: 4, Max: 4}},
		// Nearest rank: the 19th of 20 is the smallest that 95% do not
		// exceed; the 99th percentile of 20 is the largest.
		{name: "twenty", samples: twenty, want: Summary{N: 20, Min: 1, Median: 10.5, P95: 19, P99: 20, Max: 20}},
		{name: "a hundred and one", samples: hundredOne, want: Summary{N: 101, Min: 0, Median: 50, P95: 95, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.samples)
			if d := cmp.Diff(tt.want, Summarize(tt.samples)); d != "" {
				t.Errorf("Summarize(%v) (-want +got):\n%s", tt.samples, d)
			}
			if !slices.Equal(before, tt.samples) {
				t.Errorf("Summarize reordered its samples: %v, was %v", tt.samples, before)
			}
		})
	}
}
