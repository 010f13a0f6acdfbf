package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/agent/oom"
	"github.com/lightbearco/tupper/agent/process"
)

// cgroupRoot is where a gVisor sandbox shows the cgroups of its container
// when the runtime mounts them (backend/gvisor does).
const cgroupRoot = "/sys/fs/cgroup"

// enforceLimits starts what holds the sandbox's limits from inside, as
// the kernel of a VM would: the out-of-memory killer, which ends the
// largest process rather than letting the host end the whole sandbox,
// and a task limit for the whole sandbox. Only the sandbox's first
// process calls it; see docs/design/limits.md.
func enforceLimits(log *slog.Logger) {
	w := oom.New(oom.Config{Mark: process.MarkOutOfMemory, Logger: log})
	go func() {
		if err := w.Run(context.Background()); err != nil {
			log.Warn("no out-of-memory killer: a process past the memory limit ends the whole sandbox", "err", err)
		}
	}()
	if err := limitTasks(cgroupRoot); err != nil {
		log.Warn("no task limit for the whole sandbox; RLIMIT_NPROC still holds each user", "err", err)
	}
}

// limitTasks extends the RLIMIT_NPROC that the runtime gave the agent,
// which counts the tasks of one user, to the whole sandbox: it writes it
// into pids.max of the sandbox's own pids cgroup (gVisor enforces it with
// EAGAIN at fork and clone), so that root's and user's processes and
// threads together stay under it. A sandbox without a finite
// RLIMIT_NPROC or without the cgroup mounted is left alone.
func limitTasks(root string) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return err
	}
	if lim.Cur == unix.RLIM_INFINITY {
		return nil
	}
	for _, p := range []string{filepath.Join(root, "pids", "pids.max"), filepath.Join(root, "pids.max")} {
		err := os.WriteFile(p, []byte(strconv.FormatUint(lim.Cur, 10)), 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return err
	}
	return nil
}
