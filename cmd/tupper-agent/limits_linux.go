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
	process.OnStart(w.Wake)
	go func() {
		if err := w.Run(context.Background()); err != nil {
			log.Warn("no out-of-memory killer: a process past the memory limit ends the whole sandbox", "err", err)
		}
	}()
	if err := limitTasks(cgroupRoot); err != nil {
		log.Warn("no task limit for the whole sandbox; RLIMIT_NPROC still holds each user", "err", err)
	}
}

// tasksReserve is how many of the sandbox's tasks no single user can take:
// a runaway user, a fork bomb, stops that many short of the sandbox's
// limit, so that root can still start a command to end it.
const tasksReserve = 64

// limitTasks makes the RLIMIT_NPROC that the runtime gave the agent, T,
// the limit of the whole sandbox: it writes T into pids.max of the
// sandbox's own pids cgroup (gVisor enforces it with EAGAIN at fork and
// clone, for the tasks of all users together), and lowers the agent's
// RLIMIT_NPROC, which every command inherits, to T - tasksReserve (at most
// an eighth of T), so that no one user fills the sandbox. A sandbox
// without a finite RLIMIT_NPROC or without the cgroup mounted is left
// alone.
func limitTasks(root string) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return err
	}
	if lim.Cur == unix.RLIM_INFINITY {
		return nil
	}
	total := lim.Cur
	written := false
	for _, p := range []string{filepath.Join(root, "pids", "pids.max"), filepath.Join(root, "pids.max")} {
		err := writeExisting(p, strconv.FormatUint(total, 10))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EROFS) {
			// Not there, or mounted read-only by a runtime that holds the
			// limit from the host (a container's cgroup).
			continue
		}
		if err != nil {
			return err
		}
		written = true
		break
	}
	if !written {
		return nil
	}
	perUser := total - min(tasksReserve, total/8)
	return unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: perUser, Max: perUser})
}

// writeExisting writes value into the file at p, which must exist: a
// cgroup file is never made (a runtime's tmpfs at /sys/fs/cgroup would
// take a new file and enforce nothing).
func writeExisting(p, value string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
