package backendtest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// Limits every backend must hold as a VM's kernel would: the process that
// passes a limit fails or is killed, alone, and the sandbox lives on.
var conformanceLimits = backend.Resources{
	MemoryBytes: 256 << 20,
	Pids:        128,
	DiskBytes:   128 << 20,
}

// testLimits boots a sandbox with tight limits and drives each past them.
func (s *suite) testLimits(t *testing.T) {
	id := s.newID()
	spec := s.spec(id)
	spec.Resources = conformanceLimits
	s.startSpec(t, spec)
	sb, err := s.c.Connect(ctx(t), id)
	if err != nil {
		t.Fatalf("connect to sandbox %s: %v", id, err)
	}
	run(t, sb, "echo precious > /tmp/work")

	t.Run("disk", func(t *testing.T) {
		if s.cfg.NoDiskCap != "" {
			t.Skip("NOT SUPPORTED: " + s.cfg.NoDiskCap)
		}
		res, err := sb.Commands.Run(ctx(t), "head -c 256M /dev/zero > /home/user/fill")
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || !strings.Contains(strings.ToLower(res.Stderr), "no space left") {
			t.Fatalf("writing 256 MiB past a 128 MiB disk cap: %v, stderr %q; want ENOSPC", err, res.Stderr)
		}
		run(t, sb, "rm /home/user/fill")
	})

	t.Run("memory", func(t *testing.T) {
		// Touch every page, 32 MiB at a time, until killed.
		res, err := sb.Commands.Run(ctx(t), `python3 -c '
bufs = []
while True:
    bufs.append(b"x" * (32 << 20))
'`)
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || exit.ExitCode != 137 {
			t.Fatalf("a process past the memory limit: %v (result %+v); want it killed, exit code 137", err, res)
		}
	})

	t.Run("pids", func(t *testing.T) {
		// Fork until refused; every child becomes a small sleep (python
		// children would pass the memory limit first).
		res := run(t, sb, `python3 -c '
import os, signal
kids, err = [], None
try:
    while len(kids) < 10000:
        pid = os.fork()
        if pid == 0:
            os.execv("/bin/sleep", ["sleep", "60"])
        kids.append(pid)
except OSError as e:
    err = e.errno
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
print("refused" if err else "never", len(kids), err)
'`)
		f := strings.Fields(res.Stdout)
		if len(f) != 3 || f[0] != "refused" {
			t.Fatalf("a fork bomb under a %d-process limit was never refused: %q", conformanceLimits.Pids, res.Stdout)
		}
		if n, _ := strconv.Atoi(f[1]); n > int(conformanceLimits.Pids) {
			t.Errorf("%d forks succeeded under a %d-process limit", n, conformanceLimits.Pids)
		}
	})

	// Through all of it the sandbox, and what it held, lived on.
	if got := run(t, sb, "cat /tmp/work && echo alive").Stdout; got != "precious\nalive\n" {
		t.Errorf("after the limits were hit the sandbox answers %q", got)
	}
}

// testCrash checks that a backend that is a Waiter tells when a sandbox
// ends on its own, and that its State says so, until Stop cleans up.
func (s *suite) testCrash(t *testing.T) {
	w, ok := s.b.(backend.Waiter)
	if !ok || s.cfg.Crash == nil {
		t.Skip("the backend is no backend.Waiter, or Config.Crash is unset")
	}
	id := s.newID()
	s.startSpec(t, s.spec(id))
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		waited <- w.Wait(wctx, id)
	}()
	s.cfg.Crash(t, id)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait after a crash: %v, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait did not return within a minute of the crash")
	}
	if st, err := s.b.State(ctx(t), id); err == nil && st == backend.StateRunning {
		t.Errorf("State after a crash = %q, want stopped or not found", st)
	} else if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after a crash: %v; a backend must know a crashed sandbox stopped", err)
	}
	if err := s.b.Stop(ctx(t), id); err != nil {
		t.Errorf("Stop after a crash: %v", err)
	}
}
