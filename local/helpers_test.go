package local_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/network"
	"github.com/lightbearco/tupper/sdk"
)

// stack is a whole in-process Tupper on real runsc, with the Debian test
// image as its default template.
type stack struct {
	rt     *local.Runtime
	client *sdk.Client
	cfg    local.Config
}

func newStack(t testing.TB, ecfg engine.Config) *stack {
	t.Helper()
	return newStackNet(t, ecfg, backend.NetworkConfig{})
}

// newStackNet is newStack with the host's side of networking given.
func newStackNet(t testing.TB, ecfg engine.Config, ncfg backend.NetworkConfig) *stack {
	t.Helper()
	return newStackOn(t, "", ecfg, ncfg)
}

// newStackOn is newStackNet on the backend named backendName ("" for the
// default, gVisor).
func newStackOn(t testing.TB, backendName string, ecfg engine.Config, ncfg backend.NetworkConfig) *stack {
	t.Helper()
	switch backendName {
	case "", "gvisor":
		testutil.RequiresRunsc(t)
	case "runc":
		if os.Geteuid() != 0 {
			testutil.Skip(t, "the runc backend needs root")
		}
		if _, err := runc.FindRunc(); err != nil {
			testutil.Skip(t, "runc not found: "+err.Error())
		}
	}
	storeRoot, name := testutil.TestImage(t)
	if ecfg.DefaultTemplate == "" {
		ecfg.DefaultTemplate = name
	}
	cfg := local.Config{
		Root: shortTempDir(t), ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t), Engine: ecfg, Network: ncfg, Backend: backendName,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	s := &stack{cfg: cfg}
	s.open(t)
	t.Cleanup(func() {
		if s.rt != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := s.rt.Engine().KillAll(ctx); err != nil {
				t.Errorf("kill all: %v", err)
			}
			s.rt.Close()
		}
	})
	return s
}

// open (re)opens the runtime on the stack's state, as a restarted process would.
func (s *stack) open(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := local.Open(ctx, s.cfg)
	if err != nil {
		t.Fatalf("open runtime: %v", err)
	}
	s.rt, s.client = rt, &sdk.Client{Transport: rt}
}

// shortTempDir is t.TempDir under /tmp with a short name: unix socket paths
// that runsc makes under the state directory must stay under 108 bytes.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (s *stack) create(t testing.TB, opts sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := s.client.Create(ctx, opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return sb
}

func run(t testing.TB, sb *sdk.Sandbox, cmd string, opts ...sdk.CommandOption) *sdk.CommandResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Commands.Run(ctx, cmd, opts...)
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return res
}

// leftovers lists what the host still holds of the stack at root, beyond
// the files in baseline (from testutil.Tree; nil skips the file check) and
// for the sandboxes ids: processes, mounts, interfaces, firewall chains,
// cgroups, image leases and state files. What mentions keep (a sandbox
// that still runs) does not count.
func (s *stack) leftovers(t testing.TB, baseline map[string]bool, keep string, ids ...string) []string {
	t.Helper()
	netDir := filepath.Join(s.cfg.Root, "backends", "gvisor", "net")
	var ifs []string
	for _, id := range ids {
		ifs = append(ifs, network.HostIfName(network.DefaultIfPrefix, netDir, id))
	}
	return testutil.Leftovers(t, testutil.Leaks{
		Root: s.cfg.Root, Baseline: baseline, ImageRoot: s.cfg.ImageRoot,
		IDs: ids, HostIfs: ifs, Keep: []string{keep},
	})
}
