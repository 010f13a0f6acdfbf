package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// counter starts a shell loop in the sandbox at addr that counts up in
// /tmp/count ten times a second, and waits for its first counts.
func counter(t *testing.T, addr string) {
	t.Helper()
	mustRun(t, addr, "echo kept > /tmp/file; (i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done) >/dev/null 2>&1 &")
	waitCount(t, addr, 2)
}

// readCount reads the counter of the sandbox at addr.
func readCount(t *testing.T, addr string) int {
	t.Helper()
	// The counter's `echo > /tmp/count` truncates the file before it
	// writes: a read in between finds it empty, and reads again.
	out := ""
	for range 20 {
		if out = strings.TrimSpace(mustRun(t, addr, "cat /tmp/count")); out != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("count %q: %v", out, err)
	}
	return n
}

// waitCount waits until the counter of the sandbox at addr passes n: the
// counting process runs.
func waitCount(t *testing.T, addr string, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := readCount(t, addr)
		if c > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter stays at %d: its process does not run", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCheckpointStopsAndRestoreResumes(t *testing.T) {
	b := newTestBackend(t)
	id := newID("pause")
	sb := startSandbox(t, b, testSpec(id))
	counter(t, sb.AgentAddr)
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := b.Checkpoint(context.Background(), id, dir, false); err != nil {
		t.Fatal(err)
	}
	// Paused: nothing of it is left in the backend but dir.
	if _, err := b.State(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Fatalf("state of a checkpointed sandbox: %v, want not found", err)
	}
	assertNothingLeft(t, b, id)
	if _, err := os.Stat(filepath.Join(dir, "console.log")); err != nil {
		t.Errorf("the checkpoint keeps no console: %v", err)
	}

	restored, err := b.Restore(context.Background(), testSpec(id), dir)
	if err != nil {
		t.Fatal(err)
	}
	if restored.Nameserver == "" {
		t.Error("a restored sandbox names no nameserver")
	}
	if err := waitHealthy(restored.AgentAddr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustRun(t, restored.AgentAddr, "cat /tmp/file")); got != "kept" {
		t.Errorf("/tmp/file after restore: %q", got)
	}
	c := readCount(t, restored.AgentAddr)
	waitCount(t, restored.AgentAddr, c)
	// The checkpoint stays: it may be restored again, once this one is
	// gone.
	if _, err := os.Stat(filepath.Join(dir, manifestName)); err != nil {
		t.Errorf("restore consumed the checkpoint: %v", err)
	}
}

func TestCheckpointKeepsRunningAndForks(t *testing.T) {
	b := newTestBackend(t)
	src := newID("src")
	sb := startSandbox(t, b, testSpec(src))
	counter(t, sb.AgentAddr)
	dir := filepath.Join(t.TempDir(), "snap")
	if err := b.Checkpoint(context.Background(), src, dir, true); err != nil {
		t.Fatal(err)
	}
	// The source runs on.
	waitCount(t, sb.AgentAddr, readCount(t, sb.AgentAddr))
	mustRun(t, sb.AgentAddr, "echo source-only > /tmp/later")

	var forks []*backend.Sandbox
	for range 2 {
		id := newID("fork")
		f, err := b.Restore(context.Background(), testSpec(id), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Stop(context.Background(), id) })
		if err := waitHealthy(f.AgentAddr, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		forks = append(forks, f)
	}
	if forks[0].AgentAddr == forks[1].AgentAddr || forks[0].AgentAddr == sb.AgentAddr {
		t.Fatalf("forks share an address: %s %s (source %s)", forks[0].AgentAddr, forks[1].AgentAddr, sb.AgentAddr)
	}
	for _, f := range forks {
		if got := strings.TrimSpace(mustRun(t, f.AgentAddr, "cat /tmp/file")); got != "kept" {
			t.Errorf("fork %s: /tmp/file %q", f.ID, got)
		}
		if r := run(t, f.AgentAddr, "cat /tmp/later"); r.Exit == 0 {
			t.Errorf("fork %s sees a file the source wrote after the snapshot", f.ID)
		}
		waitCount(t, f.AgentAddr, readCount(t, f.AgentAddr))
	}
	// A fork's writes are its own.
	mustRun(t, forks[0].AgentAddr, "echo mine > /tmp/mine")
	if r := run(t, forks[1].AgentAddr, "cat /tmp/mine"); r.Exit == 0 {
		t.Error("one fork sees another's file")
	}
}

func TestCheckpointRefusals(t *testing.T) {
	b := newTestBackend(t)
	id := newID("refuse")
	startSandbox(t, b, testSpec(id))
	base := t.TempDir()
	taken := filepath.Join(base, "taken")
	if err := os.Mkdir(taken, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := b.Checkpoint(context.Background(), id, taken, true); !errdefs.IsAlreadyExists(err) {
		t.Errorf("checkpoint into an existing directory: %v, want already exists", err)
	}
	if err := b.Checkpoint(context.Background(), newID("none"), filepath.Join(base, "x"), true); !errdefs.IsNotFound(err) {
		t.Errorf("checkpoint of an unknown sandbox: %v, want not found", err)
	}
	if _, err := b.Restore(context.Background(), testSpec(newID("empty")), taken); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("restore from a directory without a checkpoint: %v, want failed precondition", err)
	}
	dir := filepath.Join(base, "ok")
	if err := b.Checkpoint(context.Background(), id, dir, true); err != nil {
		t.Fatal(err)
	}
	other := testSpec(newID("other"))
	other.RootFS = t.TempDir()
	if _, err := b.Restore(context.Background(), other, dir); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "image") {
		t.Errorf("restore on another image: %v, want failed precondition naming the image", err)
	}
}
