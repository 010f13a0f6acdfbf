package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Wait implements backend.Waiter: it blocks until the sandbox process of id
// exits. It watches the process through a pidfd, so it costs no runsc call
// and no polling of state files.
func (b *Backend) Wait(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	pid, err := readPid(filepath.Join(b.bundleDir(id), pidFile))
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: %w: %v", id, errdefs.ErrNotFound, err)
	}
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
	// this sandbox's runsc, whose command line names the sandbox.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !bytes.Contains(cmdline, []byte(id)) {
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
