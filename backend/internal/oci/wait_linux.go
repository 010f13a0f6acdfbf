package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// WaitProcess blocks until process pid, whose command line holds mark (the
// sandbox id) or whose cgroup path does, exits, or ctx ends. It watches the process through a pidfd,
// so it costs no runtime call and no polling of state files. A pid that is
// gone, or that went to a process without mark, counts as exited.
func WaitProcess(ctx context.Context, pid int, id string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: pidfd_open(%d): %w", id, pid, err)
	}
	defer unix.Close(fd)
	// The pid file may outlive its process, and a restarted engine may
	// read it after the pid went to someone else: the pidfd must be of
	// this sandbox's: runsc's command line names the sandbox, and a
	// runc container's first process sits in the sandbox's cgroup.
	if !namesSandbox(pid, id) {
		return nil // the sandbox's process is gone
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		// A pidfd turns readable when its process exits. Poll in short
		// steps so that ctx is honoured without another descriptor.
		n, err := unix.Poll(fds, 250)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("sandbox %q: wait: %w", id, err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// namesSandbox reports whether process pid's command line or cgroups name
// sandbox id.
func namesSandbox(pid int, id string) bool {
	for _, f := range []string{"cmdline", "cgroup"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err == nil && bytes.Contains(b, []byte(id)) {
			return true
		}
	}
	return false
}
