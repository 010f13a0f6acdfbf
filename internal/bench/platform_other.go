//go:build !linux

package bench

import (
	"context"
	"errors"
)

// errUnsupported is what the host-side measurements say off Linux.
var errUnsupported = errors.New("unsupported on this OS")

// RawRunsc measures runsc alone; off Linux there is no runsc.
type RawRunsc struct {
	Runsc  string
	RootFS string
}

// Measure fails: runsc runs on Linux only.
func (r *RawRunsc) Measure(context.Context, int, *Figure, *Figure, *Progress) error {
	return errUnsupported
}

// BusyboxRootFS fails: runsc runs on Linux only.
func BusyboxRootFS(string) (string, error) { return "", errUnsupported }

// SandboxMemory finds nothing: there is no /proc to read.
func SandboxMemory([]string) map[string]float64 { return map[string]float64{} }
