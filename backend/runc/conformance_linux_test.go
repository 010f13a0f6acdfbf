package runc_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/network"
)

// newBackend makes a runc backend under a fresh root, and stops whatever
// it still holds when the test ends.
func newBackend(t *testing.T) *runc.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root for runc, user namespaces, mounts and network namespaces")
	}
	if _, err := runc.FindRunc(); err != nil {
		testutil.Skip(t, fmt.Sprintf("runc not found: %v (scripts/setup.sh installs it)", err))
	}
	b, err := runc.New(runc.Config{
		Root:   t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	backendtest.StopOnCleanup(t, b)
	return b
}

// TestConformance runs the shared backend conformance suite against runc
// with the real agent and the Debian test image.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the conformance suite boots containers")
	}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend { return newBackend(t) },
		RootFS:     testutil.TestRootFS(t),
		AgentPath:  testutil.AgentBinary(t),
		Crash:      crash,
	})
}

// crash kills every host process of sandbox id, as a crash would: runc
// leaves no process of its own running, so those are the processes in
// the sandbox's cgroup.
func crash(t *testing.T, id string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	killed := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/"+runc.DefaultCgroupParent+"/"+id+"\n") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no host process of sandbox %s found", id)
	}
}

// TestCloseLeavesNoRunDir checks that a closed backend with no sandbox
// leaves nothing in the run directory shared by every root on the host.
func TestCloseLeavesNoRunDir(t *testing.T) {
	run := t.TempDir()
	b, err := runc.New(runc.Config{Root: t.TempDir(), RunDir: run, Network: network.Config{}})
	if err != nil {
		testutil.Skip(t, err.Error())
	}
	if entries, _ := os.ReadDir(run); len(entries) != 1 {
		t.Fatalf("the run directory holds %d entries after New, want the root's own", len(entries))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(run); len(entries) != 0 {
		t.Errorf("the run directory still holds %v after Close", entries)
	}
}

// TestRunDirKeepsParentsModes checks that making the run directory only
// ever adds search bits to its parents: a parent like /tmp (1777) keeps
// its mode, and a private one (0700) becomes traversable, no more.
func TestRunDirKeepsParentsModes(t *testing.T) {
	base := t.TempDir()
	shared, private := filepath.Join(base, "shared"), filepath.Join(base, "shared", "private")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := runc.New(runc.Config{Root: t.TempDir(), RunDir: filepath.Join(private, "runc")})
	if err != nil {
		testutil.Skip(t, err.Error())
	}
	defer b.Close()
	for path, want := range map[string]os.FileMode{shared: 0o777 | os.ModeSticky, private: 0o711} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
}
