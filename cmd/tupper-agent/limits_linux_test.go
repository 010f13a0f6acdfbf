package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLimitTasksMakesNoCgroupFile checks that the agent never makes a
// pids.max where the runtime mounted none: a file on a tmpfs would
// enforce nothing, and the agent would lower every user's task limit for
// a cgroup limit that does not exist.
func TestLimitTasksMakesNoCgroupFile(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &old); err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: 1 << 20, Max: old.Max}
	if old.Max != unix.RLIM_INFINITY && old.Max < lim.Cur {
		lim.Cur = old.Max
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NPROC, &old)

	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := limitTasks(root); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pids/pids.max", "pids.max"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("limitTasks made %s", p)
		}
	}
	var now unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NPROC, &now)
	if now.Cur != lim.Cur {
		t.Errorf("RLIMIT_NPROC went from %d to %d with no cgroup to hold the sandbox's total", lim.Cur, now.Cur)
	}
}
