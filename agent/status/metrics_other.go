//go:build !linux

package status

import (
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
)

// The agent only runs inside Linux sandboxes; elsewhere /metrics reports
// that it cannot measure.

func readCPU() (cpuSample, error) {
	return cpuSample{}, fmt.Errorf("cpu metrics: %w on this OS", errdefs.ErrNotSupported)
}

func readMem() (uint64, uint64, error) {
	return 0, 0, fmt.Errorf("memory metrics: %w on this OS", errdefs.ErrNotSupported)
}

func diskUsage(string) (uint64, uint64, error) {
	return 0, 0, fmt.Errorf("disk metrics: %w on this OS", errdefs.ErrNotSupported)
}
