package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WaitFor polls cond every 50 ms until it holds, failing the test after
// bound. what says what is awaited, for the failure message.
func WaitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", bound, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ProcessesOf returns the host processes (other than this one) whose
// command lines mention id: a sandbox's runsc processes carry it.
func ProcessesOf(id string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CrashSandbox kills with SIGKILL every host process of sandbox id (runsc's
// sandbox and gofer, which carry the id on their command lines), as a crash
// would, and waits until they are reaped: a zombie still counts as running
// to runsc.
func CrashSandbox(t testing.TB, id string) {
	t.Helper()
	var pids []int
	for _, pid := range ProcessesOf(id) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no host process of sandbox %s found", id)
	}
	WaitFor(t, 30*time.Second, fmt.Sprintf("the processes %v of sandbox %s to be reaped", pids, id), func() bool {
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				return false
			}
		}
		return true
	})
}
