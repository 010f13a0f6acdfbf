package status

import "testing"

func TestUsedPercentSince(t *testing.T) {
	tests := []struct {
		name       string
		prev, next cpuSample
		want       float64
	}{
		{"half busy", cpuSample{busy: 100, total: 1000}, cpuSample{busy: 150, total: 1100}, 50},
		{"idle", cpuSample{busy: 100, total: 1000}, cpuSample{busy: 100, total: 1100}, 0},
		{"all busy", cpuSample{busy: 100, total: 1000}, cpuSample{busy: 200, total: 1100}, 100},
		{"no time passed", cpuSample{busy: 100, total: 1000}, cpuSample{busy: 100, total: 1000}, 0},
		{"counters went back", cpuSample{busy: 100, total: 1000}, cpuSample{busy: 50, total: 900}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.next.usedPercentSince(tt.prev); got != tt.want {
				t.Errorf("usedPercentSince = %v, want %v", got, tt.want)
			}
		})
	}
}
