package wsl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/internal/testutil"
)

// standInBinary builds fakewsl once per test binary, static: it is also
// the first process of the runc sandboxes it makes.
func standInBinary(t testing.TB) string {
	t.Helper()
	return testutil.StaticBinary(t, "./backend/wsl/internal/fakewsl", "wsl.exe")
}

// standIn is one test's fakewsl: its state directory and the log of every
// argv the backend ran it with.
type standIn struct {
	path, state, log string
}

// newStandIn points the backend's wsl.exe at fakewsl with a fresh state
// for this test (through the environment, which the backend passes on).
func newStandIn(t *testing.T) *standIn {
	t.Helper()
	s := &standIn{path: standInBinary(t), state: t.TempDir()}
	s.log = filepath.Join(s.state, "argv.log")
	t.Setenv("TUPPER_FAKEWSL_STATE", s.state)
	t.Setenv("TUPPER_FAKEWSL_LOG", s.log)
	t.Setenv(WSLEnv, s.path)
	return s
}

// requireRunc skips a test that runs agents for real unless it can.
func requireRunc(t *testing.T) {
	t.Helper()
	testutil.RequiresRoot(t)
	if _, err := runc.FindRunc(); err != nil {
		testutil.Skip(t, fmt.Sprintf("runc not found: %v (scripts/setup.sh installs it)", err))
	}
}

// argvs returns what the backend ran fakewsl with, in order.
func (s *standIn) argvs(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(s.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct{ Argv []string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Argv)
	}
	return out
}

// resetLog forgets the argv logged so far.
func (s *standIn) resetLog(t *testing.T) { os.Remove(s.log) }

// distros returns the distributions fakewsl holds (not the user's).
func (s *standIn) distros(t *testing.T) []string {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(s.state, "distros"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// run runs fakewsl itself, as a test would run wsl.exe by hand.
func (s *standIn) run(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.path, args...)
	cmd.Env = append(os.Environ(), "WSL_UTF8=1", "TUPPER_FAKEWSL_LOG=")
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fakewsl %q: %v: %s", args, err, out)
	}
	return string(out)
}

// assertClean checks that nothing of the sandbox id is left: not its
// directory, its record, its distribution, a runc sandbox, a process, nor
// its ports.
func (s *standIn) assertClean(t *testing.T, b *Backend, id string, ports []int) {
	t.Helper()
	if _, err := os.Lstat(b.sandboxDir(id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox directory %s is left (%v)", b.sandboxDir(id), err)
	}
	if sb := b.lookup(id); sb != nil {
		t.Errorf("the backend still holds a record of %s: %+v", id, sb.rec)
	}
	if d := s.distros(t); len(d) > 0 {
		t.Errorf("distributions left: %q", d)
	}
	if ids, err := b.List(context.Background()); err != nil || len(ids) > 0 {
		t.Errorf("List = %q, %v; want nothing", ids, err)
	}
	if boxes, _ := os.ReadDir(filepath.Join(s.state, "vm", "sandboxes")); len(boxes) > 0 {
		t.Errorf("runc sandboxes left under fakewsl's VM: %d", len(boxes))
	}
	for _, p := range processesNaming(b.distroName(id)) {
		t.Errorf("process %d is left: %q", p, testutil.CommandLine(p))
	}
	for _, p := range ports {
		if !bindable(p) {
			t.Errorf("host port %d is still held", p)
		}
	}
}

// processesNaming returns the pids whose command line holds s.
func processesNaming(s string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostPorts returns the host ports in the --addr and --code-interpreter
// arguments of the agent's wsl.exe, from fakewsl's log.
func hostPorts(argvs [][]string) []int {
	var ports []int
	for _, argv := range argvs {
		for i, a := range argv {
			if (a == "--addr" || a == "--code-interpreter") && i+1 < len(argv) {
				_, p, _ := strings.Cut(argv[i+1], ":")
				if n, err := strconv.Atoi(p); err == nil {
					ports = append(ports, n)
				}
			}
		}
	}
	return ports
}

// newTestBackend makes a backend under a fresh root against the stand-in
// (through $TUPPER_WSL), and stops whatever it still holds when the test
// ends.
func newTestBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		ids, err := b.List(ctx)
		if err != nil {
			t.Error(err)
		}
		for _, id := range ids {
			if err := b.Stop(ctx, id); err != nil {
				t.Errorf("cleanup: Stop(%s): %v", id, err)
			}
		}
	})
	return b
}

// crashStandIn ends sandbox id's agent from outside, as a crash would: it
// kills the agent, a child of the sandbox's first process (fakewsl's
// init), whose host pid fakewsl keeps.
func crashStandIn(s *standIn, prefix string) func(t *testing.T, id string) {
	return func(t *testing.T, id string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(s.state, "distros", prefix+id, "init.pid"))
		if err != nil {
			t.Fatalf("sandbox %s: no init.pid: %v", id, err)
		}
		init, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		killed := 0
		for _, pid := range testutil.Descendants(init) {
			if argv := testutil.CommandLine(pid); len(argv) > 0 && argv[0] == distroAgent {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
		}
		if killed == 0 {
			t.Fatalf("sandbox %s: no agent among the children of %d", id, init)
		}
	}
}

// waitGone waits until no process names s.
func waitGone(t *testing.T, s string) {
	t.Helper()
	testutil.WaitFor(t, time.Minute, "the processes of "+s+" to end", func() bool { return len(processesNaming(s)) == 0 })
}

// specFor is a spec as the engine makes one, with an access token.
func specFor(id, rootfs, agent string) *backend.Spec {
	return &backend.Spec{
		ID:     id,
		RootFS: rootfs,
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "TUPPER_ACCESS_TOKEN=tok-" + id},
		Agent:  backend.Agent{Path: agent, Args: []string{"--addr", ":49983"}},
	}
}
