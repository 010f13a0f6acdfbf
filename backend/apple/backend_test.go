package apple

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// These contract tests drive the backend through the stand-in CLI in its
// scripted mode: no sandbox runs, so they run anywhere and as any user,
// and they show what the backend asks of `container` and what it makes of
// the answers.

func newTestBackend(t *testing.T, s *standin, root string) *Backend {
	t.Helper()
	b, err := New(Config{Root: root, CLI: s.path, Arch: runtime.GOARCH, StartTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// quiet drops the backend's logs, which the contract tests provoke.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testSpec(t *testing.T, id string) *backend.Spec {
	return &backend.Spec{
		ID:        id,
		RootFS:    tinyRoot(t),
		Env:       []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Agent:     backend.Agent{Path: agentBinary(t, runtime.GOARCH), Args: []string{"--addr", ":49983"}},
		Resources: backend.Resources{CPUs: 0.5, MemoryBytes: 256<<20 + 1, Pids: 128, DiskBytes: 128 << 20},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// tmpArchive stands for the temporary archive's random name in argv.
var tmpArchive = regexp.MustCompile(`/tmp/image-[0-9]+\.tar$`)

func normalize(calls [][]string, root string) [][]string {
	for _, c := range calls {
		for i, a := range c {
			a = strings.ReplaceAll(a, root, "ROOT")
			c[i] = tmpArchive.ReplaceAllString(a, "/tmp/image-N.tar")
		}
	}
	return calls
}

func TestStartStopArgv(t *testing.T) {
	addr := agentAt(t)
	s := newStandin(t, envAddrVar+"="+addr)
	root := t.TempDir()
	b := newTestBackend(t, s, root)
	ctx := ctxT(t)

	spec := testSpec(t, "sb1")
	ref, err := imageRef(spec)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := addr + ":49983"; sb.AgentAddr != want || sb.ID != "sb1" || sb.StartedAt.IsZero() {
		t.Errorf("Start = %+v, want the agent at %s", sb, want)
	}
	want := [][]string{
		{"list", "--all", "--format", "json"},
		{"image", "list", "--format", "json"},
		{"image", "load", "--input", "ROOT/tmp/image-N.tar"},
		{"run", "--detach", "--name", "sb1", "--cpus", "1", "--memory", "257M", "--ulimit", "nproc=128:128", "--user", "0:0",
			"--env", "PATH=/usr/bin:/bin", "--env", "LANG=C.UTF-8",
			"--label", "tupper.id=sb1", "--label", "tupper.root=" + b.rootLabel,
			"--mount", "type=bind,source=ROOT/agent,target=/.tupper,readonly",
			"--entrypoint", "/.tupper/tupper-agent", ref, "--addr", ":49983"},
		{"inspect", "sb1"},
	}
	if diff := cmp.Diff(want, normalize(s.calls(t), root)); diff != "" {
		t.Errorf("Start's commands (-want +got):\n%s", diff)
	}
	if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
		t.Errorf("Start left %v in its tmp directory", left)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "agent", "tupper-agent")); len(got) == 0 {
		t.Error("the agent is not in the agent directory")
	}

	// A second sandbox of the same image: not loaded again, and the
	// defaults fill what the spec leaves out.
	spec2 := testSpec(t, "sb2")
	spec2.RootFS, spec2.Resources, spec2.Env = spec.RootFS, backend.Resources{}, nil
	if _, err := b.Start(ctx, spec2); err != nil {
		t.Fatal(err)
	}
	want = [][]string{
		{"list", "--all", "--format", "json"},
		{"run", "--detach", "--name", "sb2", "--cpus", "2", "--memory", "1024M", "--ulimit", "nproc=1024:1024", "--user", "0:0",
			"--env", defaultPath,
			"--label", "tupper.id=sb2", "--label", "tupper.root=" + b.rootLabel,
			"--mount", "type=bind,source=ROOT/agent,target=/.tupper,readonly",
			"--entrypoint", "/.tupper/tupper-agent", ref, "--addr", ":49983"},
		{"inspect", "sb2"},
	}
	if diff := cmp.Diff(want, normalize(s.calls(t), root)); diff != "" {
		t.Errorf("the second Start's commands (-want +got):\n%s", diff)
	}

	// Another process (a new Backend on the same root) finds the image in
	// `container image list`.
	b2 := newTestBackend(t, s, root)
	spec3 := testSpec(t, "sb3")
	spec3.RootFS = spec.RootFS
	if _, err := b2.Start(ctx, spec3); err != nil {
		t.Fatal(err)
	}
	if got := s.calls(t); len(got) != 4 || !slices.Equal(got[1], []string{"image", "list", "--format", "json"}) || got[2][0] != "run" {
		t.Errorf("a new process's Start ran %q; want list, image list, run, inspect", got)
	}

	if st, err := b.State(ctx, "sb1"); err != nil || st != backend.StateRunning {
		t.Errorf("State = %q, %v", st, err)
	}
	ids, err := b.List(ctx)
	if err != nil || !slices.Equal(ids, []string{"sb1", "sb2", "sb3"}) {
		t.Errorf("List = %q, %v", ids, err)
	}
	stats, err := b.Stats(ctx, "sb1")
	if err != nil || stats.MemoryLimitBytes != 257<<20 || stats.Pids != 3 || stats.CPUUsageNanos != 1234567000 {
		t.Errorf("Stats = %+v, %v", stats, err)
	}
	s.calls(t)

	if err := b.Stop(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	want = [][]string{
		{"list", "--all", "--format", "json"},
		{"kill", "sb1"},
		{"delete", "--force", "sb1"},
		{"list", "--all", "--format", "json"},
	}
	if diff := cmp.Diff(want, s.calls(t)); diff != "" {
		t.Errorf("Stop's commands (-want +got):\n%s", diff)
	}
	if st, err := b.State(ctx, "sb1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Stop = %q, %v; want ErrNotFound", st, err)
	}
	if err := b.Stop(ctx, "sb1"); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	s.calls(t)
	if err := b.Stop(ctx, "nosuchsandbox"); err != nil {
		t.Errorf("Stop of an unknown id: %v", err)
	}
	if diff := cmp.Diff([][]string{{"list", "--all", "--format", "json"}}, s.calls(t)); diff != "" {
		t.Errorf("Stop of an unknown id ran (-want +got):\n%s", diff)
	}

	// A container that ended on its own is deleted, not killed.
	s.run(t, "kill", "sb2")
	if st, err := b.State(ctx, "sb2"); err != nil || st != backend.StateStopped {
		t.Errorf("State of a killed container = %q, %v; want stopped", st, err)
	}
	if err := b.Wait(ctx, "sb2"); err != nil {
		t.Errorf("Wait on a stopped container: %v", err)
	}
	s.calls(t)
	if err := b.Stop(ctx, "sb2"); err != nil {
		t.Fatal(err)
	}
	want = [][]string{
		{"list", "--all", "--format", "json"},
		{"delete", "--force", "sb2"},
		{"list", "--all", "--format", "json"},
	}
	if diff := cmp.Diff(want, s.calls(t)); diff != "" {
		t.Errorf("Stop of a stopped container ran (-want +got):\n%s", diff)
	}
}

// TestStartFailuresLeaveNothing fails each step of Start in turn and checks
// that the error says what failed, and that nothing is left: no container,
// no archive.
func TestStartFailuresLeaveNothing(t *testing.T) {
	addr := agentAt(t)
	tests := []struct {
		name  string
		fail  string
		addr  string   // default: an agent listens
		want  []string // in the error
		class error
	}{
		{name: "image load fails", fail: "image-load", want: []string{"`container image load --input", "injected failure of image-load"}},
		{name: "run fails", fail: "run", want: []string{"`container run --detach --name sb1", "injected failure of run"}},
		{name: "run fails after it made the container", fail: "run-created", want: []string{"`container run", "run-created"}},
		{name: "inspect fails", fail: "inspect", want: []string{"`container inspect sb1`", "injected failure of inspect"}},
		{name: "the container gets no address", fail: "no-address", want: []string{"no IPv4 address", "container network list"}, class: errdefs.ErrUnavailable},
		{name: "the agent never answers", addr: nobodyAt(t), want: []string{"does not take connections at", "macOS 26", "container logs sb1"}, class: errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := addr
			if tt.addr != "" {
				a = tt.addr
			}
			s := newStandin(t, envAddrVar+"="+a, envFailVar+"="+tt.fail)
			root := t.TempDir()
			b, err := New(Config{Root: root, CLI: s.path, Arch: runtime.GOARCH, StartTimeout: 500 * time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Start(ctxT(t), testSpec(t, "sb1"))
			if err == nil {
				t.Fatal("Start succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			if !strings.Contains(err.Error(), `start sandbox "sb1"`) {
				t.Errorf("the error does not name the sandbox: %v", err)
			}
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("error class: %v, want %v", err, tt.class)
			}
			if left := s.containers(t); len(left) != 0 {
				t.Errorf("containers left: %q", left)
			}
			if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
				t.Errorf("files left in tmp: %v", left)
			}
			if ids, err := b.List(ctxT(t)); err != nil || len(ids) != 0 {
				t.Errorf("List after a failed Start = %q, %v", ids, err)
			}
		})
	}
}

// TestStartFailureAndCleanupFailure: when the undo fails too, the error
// says both, and what is left is listed (the engine stops it later).
func TestStartFailureAndCleanupFailure(t *testing.T) {
	s := newStandin(t, envAddrVar+"="+agentAt(t), envFailVar+"=inspect,delete")
	b := newTestBackend(t, s, t.TempDir())
	_, err := b.Start(ctxT(t), testSpec(t, "sb1"))
	if err == nil || !strings.Contains(err.Error(), "injected failure of inspect") || !strings.Contains(err.Error(), "removing what it made failed") ||
		!strings.Contains(err.Error(), "injected failure of delete") {
		t.Fatalf("Start = %v; want the inspect failure and the failed removal", err)
	}
	if ids, err := b.List(ctxT(t)); err != nil || !slices.Equal(ids, []string{"sb1"}) {
		t.Errorf("List = %q, %v; want the container that could not be removed", ids, err)
	}
	if err := b.Stop(ctxT(t), "sb1"); err == nil || !strings.Contains(err.Error(), "still there") {
		t.Errorf("Stop while delete fails = %v; want an error saying the container is still there", err)
	}
	// Once delete works, Stop removes it.
	b.cli.path = s.with(t, envAddrVar+"=127.0.0.1").path
	if err := b.Stop(ctxT(t), "sb1"); err != nil {
		t.Fatal(err)
	}
	if left := s.containers(t); len(left) != 0 {
		t.Errorf("containers left: %q", left)
	}
}

// TestEveryShape runs a sandbox's life through the JSON of each version.
func TestEveryShape(t *testing.T) {
	addr := agentAt(t)
	for _, shape := range []string{"1.0", "0.8", "0.7"} {
		t.Run(shape, func(t *testing.T) {
			s := newStandin(t, envAddrVar+"="+addr, envShapeVar+"="+shape)
			b := newTestBackend(t, s, t.TempDir())
			ctx := ctxT(t)
			sb, err := b.Start(ctx, testSpec(t, "sb1"))
			if err != nil {
				t.Fatal(err)
			}
			if sb.AgentAddr != addr+":49983" {
				t.Errorf("AgentAddr = %q, want %s:49983", sb.AgentAddr, addr)
			}
			if st, err := b.State(ctx, "sb1"); err != nil || st != backend.StateRunning {
				t.Errorf("State = %q, %v", st, err)
			}
			if ids, err := b.List(ctx); err != nil || !slices.Equal(ids, []string{"sb1"}) {
				t.Errorf("List = %q, %v", ids, err)
			}
			s.run(t, "kill", "sb1")
			if st, err := b.State(ctx, "sb1"); err != nil || st != backend.StateStopped {
				t.Errorf("State after kill = %q, %v", st, err)
			}
			if err := b.Stop(ctx, "sb1"); err != nil {
				t.Fatal(err)
			}
			if ids, err := b.List(ctx); err != nil || len(ids) != 0 {
				t.Errorf("List after Stop = %q, %v", ids, err)
			}
		})
	}
}

// TestOthersContainers: containers the backend did not make, by another
// Tupper root or by the user, are not its own.
func TestOthersContainers(t *testing.T) {
	addr := agentAt(t)
	s := newStandin(t, envAddrVar+"="+addr)
	mine := newTestBackend(t, s, t.TempDir())
	theirs := newTestBackend(t, s, t.TempDir())
	ctx := ctxT(t)
	if _, err := theirs.Start(ctx, testSpec(t, "theirs")); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(theirs.cfg.Root, "agent")
	s.run(t, "run", "--detach", "--name", "web", "--mount", "type=bind,source="+agent+",target=/x",
		"--entrypoint", "/x/tupper-agent", mustRef(t, theirs))
	s.calls(t)

	if ids, err := mine.List(ctx); err != nil || len(ids) != 0 {
		t.Errorf("List = %q, %v; want none of the others' containers", ids, err)
	}
	if _, err := mine.State(ctx, "theirs"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State of another root's sandbox: %v, want ErrNotFound", err)
	}
	if err := mine.Stop(ctx, "web"); err != nil {
		t.Errorf("Stop of the user's container: %v", err)
	}
	if err := mine.Stop(ctx, "theirs"); err != nil {
		t.Errorf("Stop of another root's sandbox: %v", err)
	}
	if got := s.containers(t); !slices.Equal(got, []string{"theirs", "web"}) {
		t.Errorf("containers after the Stops = %q; want both still there", got)
	}
	_, err := mine.Start(ctx, testSpec(t, "web"))
	if !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "Tupper did not make") {
		t.Errorf("Start of a name the user has: %v; want ErrAlreadyExists saying so", err)
	}
	if _, err := theirs.Start(ctx, testSpec(t, "theirs")); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second Start: %v, want ErrAlreadyExists", err)
	}
	for _, c := range s.calls(t) {
		if c[0] == "kill" || c[0] == "delete" {
			t.Errorf("the backend ran %q on a container not its own", c)
		}
	}
}

func mustRef(t *testing.T, b *Backend) string {
	t.Helper()
	b.images.mu.Lock()
	defer b.images.mu.Unlock()
	for ref := range b.images.loaded {
		return ref
	}
	t.Fatal("no image loaded")
	return ""
}

// TestStartRefuses: what the backend cannot do fails before it runs any
// container.
func TestStartRefuses(t *testing.T) {
	s := newStandin(t, envAddrVar+"=127.0.0.1")
	b := newTestBackend(t, s, t.TempDir())
	wrongArch := "arm64"
	if runtime.GOARCH == "arm64" {
		wrongArch = "amd64"
	}
	tests := []struct {
		name   string
		mod    func(*backend.Spec)
		arch   string
		want   string
		class  error
		noCall bool
	}{
		{name: "an egress policy", mod: func(s *backend.Spec) { s.Network = &netpolicy.Policy{DenyOut: []string{"0.0.0.0/0"}} },
			want: "egress policies are not enforced", class: errdefs.ErrNotSupported, noCall: true},
		{name: "a one-letter id", mod: func(s *backend.Spec) { s.ID = "a" }, want: "container's name is 2 to 63", class: errdefs.ErrInvalidArgument, noCall: true},
		{name: "no image", mod: func(s *backend.Spec) { s.RootFS = "" }, want: "names no image", class: errdefs.ErrInvalidArgument, noCall: true},
		{name: "an agent for another architecture", arch: wrongArch, want: "GOARCH=" + wrongArch, class: errdefs.ErrInvalidArgument},
		{name: "an agent that is no executable", mod: func(s *backend.Spec) { s.Agent.Path = s.RootFS + "/etc/hostname" }, want: "is no linux executable", class: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bb := b
			if tt.arch != "" {
				var err error
				if bb, err = New(Config{Root: t.TempDir(), CLI: s.path, Arch: tt.arch}); err != nil {
					t.Fatal(err)
				}
			}
			spec := testSpec(t, "sb1")
			if tt.mod != nil {
				tt.mod(spec)
			}
			_, err := bb.Start(ctxT(t), spec)
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start = %v; want %v saying %q", err, tt.class, tt.want)
			}
			calls := s.calls(t)
			if tt.noCall && len(calls) != 0 {
				t.Errorf("the refused Start ran %q", calls)
			}
			for _, c := range calls {
				if c[0] == "run" || c[0] == "image" {
					t.Errorf("the refused Start ran %q", c)
				}
			}
		})
	}
	// A network policy that is about who reaches the sandbox is no egress
	// policy.
	private := false
	if err := b.checkSpec(&backend.Spec{ID: "sb1", RootFS: "/x", Agent: backend.Agent{Path: "/a"}, Network: &netpolicy.Policy{AllowPublicTraffic: &private}}); err != nil {
		t.Errorf("a policy without egress rules: %v", err)
	}
}

func TestNew(t *testing.T) {
	_, err := New(Config{Root: t.TempDir(), CLI: "no-such-container-cli"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "github.com/apple/container/releases") {
		t.Errorf("New without the CLI = %v; want ErrNotFound saying where to get it", err)
	}
	for _, c := range []Config{{}, {Root: "rel"}, {Root: "/a,b"}, {Root: "/r", Arch: "riscv64"}, {Root: "/r", AgentPath: "agent"}, {Root: "/r", DefaultPids: -1}} {
		if _, err := New(c); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument", c, err)
		}
	}
	// Archives a crashed process left are removed.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "tmp"), 0o755)
	os.WriteFile(filepath.Join(root, "tmp", "image-1.tar"), []byte("half"), 0o644)
	s := newStandin(t)
	newTestBackend(t, s, root)
	if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
		t.Errorf("New left %v in tmp", left)
	}
}

func TestConfigFrom(t *testing.T) {
	c, err := configFrom(backend.Config{Root: "/r", Options: map[string]string{"container": "/opt/bin/container", "agent": "/opt/tupper-agent-linux-arm64", "arch": "arm64", "cpus": "4", "memory-mb": "2048", "pids": "512"}})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Root: "/r", CLI: "/opt/bin/container", AgentPath: "/opt/tupper-agent-linux-arm64", Arch: "arm64", DefaultCPUs: 4, DefaultMemoryBytes: 2 << 30, DefaultPids: 512}
	if diff := cmp.Diff(want, c, cmp.AllowUnexported(Config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	for _, bad := range []backend.Config{
		{Root: "/r", Options: map[string]string{"contianer": "x"}},
		{Root: "/r", Options: map[string]string{"pids": "many"}},
		{Root: "/r", Options: map[string]string{"cpus": "-1"}},
	} {
		if _, err := configFrom(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("configFrom(%v) = %v, want ErrInvalidArgument", bad.Options, err)
		}
	}
	if _, err := configFrom(backend.Config{Root: "/r", Network: backend.NetworkConfig{NoEgress: true}}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("configFrom with egress off = %v, want ErrNotSupported", err)
	}
}
