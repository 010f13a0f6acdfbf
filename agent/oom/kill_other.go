//go:build !linux

package oom

import (
	"errors"
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
)

var errGone = errors.New("process gone")

// killProcess is unsupported outside Linux, where no sandbox runs the agent.
func killProcess(string, proc) error {
	return fmt.Errorf("kill: %w on this OS", errdefs.ErrNotSupported)
}

// killGroup is unsupported outside Linux.
func killGroup(int) error {
	return fmt.Errorf("kill: %w on this OS", errdefs.ErrNotSupported)
}

func getpgrp() int { return 0 }
