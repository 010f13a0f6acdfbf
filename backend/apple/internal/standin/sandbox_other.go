//go:build !linux

package main

import (
	"context"
	"errors"
)

// newSandboxEngine fails: sandboxes run on Linux only; use the scripted
// mode.
func newSandboxEngine(context.Context, string) (engine, error) {
	return nil, errors.New("the stand-in runs sandboxes on Linux only: set " + envAddr + " for the scripted mode")
}
