package local_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/network"
	"github.com/lightbearco/tupper/sdk"
)

// addressLock is the lock file that the engine on root takes first when it
// gives a sandbox an address.
func addressLock(root string) string {
	return network.Config{Dir: filepath.Join(root, "backends", "gvisor", "net")}.HomeLockPath()
}

// newStackAt is newStack on the given state root.
func newStackAt(t *testing.T, root string) *stack {
	t.Helper()
	testutil.RequiresRunsc(t)
	storeRoot, name := testutil.TestImage(t)
	s := &stack{cfg: local.Config{
		Root: root, ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t), Engine: engine.Config{DefaultTemplate: name},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
	s.open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.rt.Engine().KillAll(ctx); err != nil {
			t.Errorf("kill all: %v", err)
		}
		s.rt.Close()
	})
	return s
}

// TestRootsDoNotBlockEachOther runs two engines on different state roots,
// as two daemons on one host: they create sandboxes at the same time, and
// one creates while the other's address lock is held, as by a daemon stuck
// in the middle of giving a sandbox its address.
func TestRootsDoNotBlockEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	rootA := shortTempDir(t)
	rootB := shortTempDir(t)
	for addressLock(rootB) == addressLock(rootA) {
		rootB = shortTempDir(t) // one chance in 64: the same home block
	}
	a, b := newStackAt(t, rootA), newStackAt(t, rootB)

	var wg sync.WaitGroup
	for _, s := range []*stack{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := s.client.Create(ctx, sdk.CreateOptions{})
			if err != nil {
				t.Errorf("create on %s: %v", s.cfg.Root, err)
				return
			}
			if res, err := sb.Commands.Run(ctx, "echo ok"); err != nil || res.Stdout != "ok\n" {
				t.Errorf("a command in a sandbox on %s: %+v, %v", s.cfg.Root, res, err)
			}
		}()
	}
	wg.Wait()

	// Hold the first engine's address lock: the second still creates.
	f, err := os.OpenFile(addressLock(rootA), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := b.client.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatalf("create on the second root while the first one's address lock is held: %v", err)
	}
	if res, err := sb.Commands.Run(ctx, "echo ok"); err != nil || res.Stdout != "ok\n" {
		t.Errorf("a command: %+v, %v", res, err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if _, err := a.client.Create(ctx, sdk.CreateOptions{}); err != nil {
		t.Errorf("create on the first root once its lock is free: %v", err)
	}
}
