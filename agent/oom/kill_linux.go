package oom

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errGone is killProcess's answer for a victim that has already gone.
var errGone = errors.New("process gone")

// killProcess sends SIGKILL to p, and only to p: through a pidfd opened
// before p's start time is checked again, so a process that took p's pid
// in between is never hit. Where pidfds are missing it falls back to
// kill(2) after the same check.
func killProcess(procRoot string, p proc) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return errGone
	}
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("pidfd_open %d: %w", p.pid, err)
		}
		if !p.alive(procRoot) {
			return errGone
		}
		return wrapKill(p.pid, unix.Kill(p.pid, unix.SIGKILL))
	}
	defer unix.Close(fd)
	if !p.alive(procRoot) {
		return errGone
	}
	return wrapKill(p.pid, unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0))
}

func wrapKill(pid int, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return errGone
	default:
		return fmt.Errorf("kill %d: %w", pid, err)
	}
}

// killGroup sends SIGKILL to process group pgrp: its members forked after
// the caller looked die too.
func killGroup(pgrp int) error {
	return wrapKill(-pgrp, unix.Kill(-pgrp, unix.SIGKILL))
}

// getpgrp returns the calling process's process group.
func getpgrp() int { return unix.Getpgrp() }
