package local_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
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
	testutil.RequiresRunsc(t)
	storeRoot, name := testutil.TestImage(t)
	if ecfg.DefaultTemplate == "" {
		ecfg.DefaultTemplate = name
	}
	cfg := local.Config{
		Root: shortTempDir(t), ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t), Engine: ecfg, Network: ncfg,
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
// the files in baseline (from treeOf) and for the sandboxes ids: processes,
// mounts, veths, cgroups and state files. What mentions keep (a sandbox
// that still runs) does not count.
func leftovers(t testing.TB, root string, baseline map[string]bool, keep string, ids ...string) (found []string) {
	t.Helper()
	defer func() {
		if keep != "" {
			found = slices.DeleteFunc(found, func(s string) bool { return strings.Contains(s, keep) })
		}
	}()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), root) {
			found = append(found, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if strings.Contains(line, root) {
				found = append(found, "mount: "+line)
			}
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.Contains(l.Attrs().Alias, root) {
			found = append(found, "interface "+l.Attrs().Name+" ("+l.Attrs().Alias+")")
		}
	}
	for _, id := range ids {
		for _, pattern := range []string{"/sys/fs/cgroup/*/tupper/" + id, "/sys/fs/cgroup/tupper/" + id} {
			m, _ := filepath.Glob(pattern)
			for _, p := range m {
				found = append(found, "cgroup "+p)
			}
		}
	}
	if baseline != nil {
		for p := range treeOf(t, filepath.Join(root, "backends")) {
			if !baseline[p] {
				found = append(found, "file "+p)
			}
		}
	}
	return found
}

// treeOf lists every path below dir.
func treeOf(t testing.TB, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			out[p] = true
		}
		return nil
	})
	return out
}
