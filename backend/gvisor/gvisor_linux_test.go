package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// Traffic in these tests goes only to sandboxes the tests started, over
// veths in namespaces the tests made.

func TestSandboxLifecycle(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	id := newID("life")
	before := hashTree(t, testRootFS)

	sb := startSandbox(t, b, testSpec(id))
	if sb.ID != id || sb.Pid <= 0 || sb.StartedAt.IsZero() {
		t.Errorf("Start = %+v", sb)
	}
	if !strings.HasSuffix(sb.AgentAddr, ":"+strconv.Itoa(backend.AgentPort)) || !strings.HasPrefix(sb.AgentAddr, "10.213.") {
		t.Errorf("AgentAddr = %q, want 10.213.x.y:%d", sb.AgentAddr, backend.AgentPort)
	}
	if st, err := b.State(ctx, id); err != nil || st != backend.StateRunning {
		t.Errorf("State = %q, %v; want running", st, err)
	}
	if ids, err := b.List(ctx); err != nil || !slices.Contains(ids, id) {
		t.Errorf("List = %v, %v; want it to hold %s", ids, err, id)
	}
	if _, err := b.Start(ctx, testSpec(id)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Start = %v, want ErrAlreadyExists", err)
	}

	t.Run("process", func(t *testing.T) {
		if got := mustRun(t, sb.AgentAddr, "tr '\\0' ' ' < /proc/1/cmdline"); strings.TrimSpace(got) != AgentPath {
			t.Errorf("pid 1 is %q, want the agent", got)
		}
		if got := mustRun(t, sb.AgentAddr, "id -u; pwd; hostname; echo $TUPPER_TEST"); got != "0\n/\n"+id+"\n1\n" {
			t.Errorf("uid, cwd, hostname, env = %q", got)
		}
	})

	t.Run("host processes are invisible", func(t *testing.T) {
		out := mustRun(t, sb.AgentAddr, "ls /proc | grep -c '^[0-9]'")
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatal(out)
		}
		// The agent, sh, ls, grep: nothing of the host's hundreds.
		if n > 8 {
			t.Errorf("sandbox sees %d processes", n)
		}
		hostPid := os.Getpid()
		if r := run(t, sb.AgentAddr, fmt.Sprintf("cat /proc/%d/cmdline", hostPid)); r.Exit == 0 && strings.Contains(r.Output, "gvisor.test") {
			t.Errorf("sandbox reads the test's /proc/%d: %q", hostPid, r.Output)
		}
		if out := mustRun(t, sb.AgentAddr, "ps -o comm"); strings.Contains(out, "runsc") || strings.Contains(out, "gvisor.test") {
			t.Errorf("ps in the sandbox shows host processes:\n%s", out)
		}
	})

	t.Run("host files are invisible", func(t *testing.T) {
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte("host only"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := run(t, sb.AgentAddr, "cat "+secret); r.Exit == 0 {
			t.Errorf("sandbox read host file %s: %q", secret, r.Output)
		}
		if r := run(t, sb.AgentAddr, "ls "+filepath.Dir(testAgent)); r.Exit == 0 {
			t.Errorf("sandbox sees the agent's host directory: %q", r.Output)
		}
		if out := mustRun(t, sb.AgentAddr, "ls /"); strings.Contains(out, "work") || strings.Contains(out, "home") {
			t.Errorf("sandbox root holds host directories: %q", out)
		}
	})

	// Root in the sandbox may make setuid files, device nodes and files of
	// any uid in /tmp, its home and its root. They stay in the sandbox's
	// layer, whose only host file is unlinked: nothing of them lands in
	// the bundle under its own name, owner or mode.
	t.Run("sandbox files never land on the host", func(t *testing.T) {
		mustRun(t, sb.AgentAddr, strings.Join([]string{
			"mkdir -p /home/user",
			"for d in /tmp /home/user /; do cp /bin/busybox $d/suid-marker && chmod 4755 $d/suid-marker && echo u > $d/uid-marker && chown 1000:1000 $d/uid-marker; done",
			"mknod /tmp/dev-marker c 1 3",
			"ls -ln /tmp/suid-marker /home/user/uid-marker",
		}, " && "))
		dir := b.BundleDir(id)
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				return err
			}
			switch {
			case strings.Contains(d.Name(), "-marker"):
				t.Errorf("a sandbox file is on the host: %s", path)
			case st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 && !d.IsDir():
				t.Errorf("setuid or setgid file on the host: %s (mode %o)", path, st.Mode)
			case st.Uid == 1000 || st.Gid == 1000:
				t.Errorf("file of uid 1000 on the host: %s", path)
			case st.Mode&unix.S_IFMT == unix.S_IFCHR || st.Mode&unix.S_IFMT == unix.S_IFBLK:
				t.Errorf("device node on the host: %s", path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The filestore's directory and the root are nosuid, nodev mounts
		// all the same, should runsc ever leave a named file there.
		for _, d := range []string{upperDir, rootfsDir} {
			opts := mountOptions(t, filepath.Join(dir, d))
			if !strings.Contains(opts, "nosuid") || !strings.Contains(opts, "nodev") {
				t.Errorf("%s is mounted %q, want nosuid and nodev", d, opts)
			}
		}
	})

	t.Run("agent is read-only", func(t *testing.T) {
		if r := run(t, sb.AgentAddr, "echo x > "+AgentPath); r.Exit == 0 {
			t.Error("the sandbox wrote its agent binary")
		}
	})

	t.Run("writes stay in the sandbox", func(t *testing.T) {
		mustRun(t, sb.AgentAddr, strings.Join([]string{
			"echo changed > /etc/motd",
			"rm /bin/ls",
			"mkdir -p /new/dir && echo hi > /new/dir/file",
			"head -c 4194304 /dev/zero > /big",
			"chmod 700 /root",
			"ln -s /x /bin/newlink",
		}, " && "))
		if got := mustRun(t, sb.AgentAddr, "cat /etc/motd /new/dir/file; test -e /bin/ls || echo gone"); got != "changed\nhi\ngone\n" {
			t.Errorf("sandbox sees %q after its writes", got)
		}
		if after := hashTree(t, testRootFS); after != before {
			t.Error("the shared root filesystem changed")
		}
		if entries, _ := os.ReadDir(filepath.Join(b.BundleDir(id), upperDir)); len(entries) != 0 {
			t.Errorf("the overlay filestore should be unlinked, found %d entries", len(entries))
		}
	})

	// /tmp is the root's, in the sandbox's capped layer: neither a host
	// directory nor runsc's memory tmpfs.
	t.Run("tmp is in the sandbox's layer", func(t *testing.T) {
		mustRun(t, sb.AgentAddr, "echo scratch > /tmp/f && test -k /tmp && test -w /tmp")
		if out := mustRun(t, sb.AgentAddr, "cat /proc/mounts"); strings.Contains(out, " /tmp ") {
			t.Errorf("/tmp is a mount of its own:\n%s", out)
		}
		// The test agent is not the real one, which removes the
		// placeholder: it is still there for this test to see.
		if r := run(t, sb.AgentAddr, "test -f /tmp/"+tmpPlaceholder); r.Exit != 0 {
			t.Errorf("no /tmp/%s in the sandbox", tmpPlaceholder)
		}
	})

	t.Run("stats", func(t *testing.T) {
		s, err := b.Stats(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.CPUUsageNanos == 0 || s.MemoryUsageBytes == 0 || s.Pids == 0 || s.MemoryLimitBytes != DefaultMemoryBytes {
			t.Errorf("Stats = %+v", s)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		if err := b.Resume(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Resume of a running sandbox = %v, want ErrFailedPrecondition", err)
		}
		if err := b.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st, err := b.State(ctx, id); err != nil || st != backend.StatePaused {
			t.Errorf("State = %q, %v; want paused", st, err)
		}
		if healthy(sb.AgentAddr, 200*time.Millisecond) {
			t.Error("a paused sandbox answered")
		}
		if err := b.Pause(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("second Pause = %v, want ErrFailedPrecondition", err)
		}
		if err := b.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := waitHealthy(sb.AgentAddr, 5*time.Second); err != nil {
			t.Errorf("after Resume: %v", err)
		}
	})

	if err := b.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, b, id)
	if err := b.Stop(ctx, id); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
	if _, err := b.State(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Stop = %v, want ErrNotFound", err)
	}
	if err := b.Pause(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pause after Stop = %v, want ErrNotFound", err)
	}
	if after := hashTree(t, testRootFS); after != before {
		t.Error("the shared root filesystem changed")
	}
}

// oomKills returns the number of OOM kills in the memory cgroup of id.
func oomKills(t *testing.T, b *Backend, id string) int {
	t.Helper()
	dirs, err := oci.CgroupDirs(cgroupsPath(b.cfg.CgroupParent, id))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} { // v1, v2
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					n, _ := strconv.Atoi(v)
					return n
				}
			}
		}
	}
	t.Fatalf("no memory cgroup with an oom_kill count for %s in %v", id, dirs)
	return 0
}

func TestMemoryLimit(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	id := newID("oom")
	spec := testSpec(id)
	spec.Resources.MemoryBytes = 256 << 20
	sb := startSandbox(t, b, spec)

	// Files written to the root and to /tmp are on disk, not in memory:
	// files bigger than the memory limit fit.
	mustRun(t, sb.AgentAddr, "dd if=/dev/zero of=/big bs=1M count=384 && dd if=/dev/zero of=/tmp/big bs=1M count=384 && rm /big /tmp/big")
	if !healthy(sb.AgentAddr, 2*time.Second) {
		t.Fatal("sandbox died writing big files")
	}
	if n := oomKills(t, b, id); n != 0 {
		t.Fatalf("%d OOM kills before the hog", n)
	}

	// Memory itself is limited. The test agent has no out-of-memory
	// killer (the real agent's is tested in local/), so this is the
	// backstop: a hog past the host cgroup's limit, the sandbox's limit
	// plus the headroom, gets the whole sandbox OOM-killed by the host.
	// The request never gets an answer, so it is left behind.
	hogMiB := resolveLimits(&b.cfg, spec.Resources).hostMemory()>>20 + 64
	hog, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(hog, http.MethodGet, fmt.Sprintf("http://%s/alloc?mb=%d", sb.AgentAddr, hogMiB), nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("allocating %d MiB under a 256 MiB limit answered %s", hogMiB, resp.Status)
		}
		answered <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := b.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st == backend.StateStopped {
			break
		}
		select {
		case err := <-answered:
			t.Fatalf("sandbox is %s after the hog: %v", st, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox is %s 20s after the hog", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := oomKills(t, b, id); n == 0 {
		t.Error("no OOM kill recorded in the sandbox's memory cgroup")
	}
	if err := b.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, b, id)
}

func TestPidsLimit(t *testing.T) {
	b := newTestBackend(t)
	id := newID("pids")
	spec := testSpec(id)
	spec.Resources.Pids = 64
	sb := startSandbox(t, b, spec)

	// A fork loop in a subshell: each sleep is a process, and the subshell
	// dies at the limit. Its EXIT trap, all shell builtins as nothing can
	// fork by then, kills the sleeps and reaps them (the test agent, as
	// pid 1, reaps nothing).
	r := run(t, sb.AgentAddr, `rm -f /tmp/pids
( trap 'while read p; do kill $p; done </tmp/pids; wait' EXIT
  i=0; while [ $i -lt 500 ]; do sleep 600 </dev/null >/dev/null 2>&1 & echo $! >>/tmp/pids; i=$((i+1)); done )
echo loop exit $?; n=0; while read p; do n=$((n+1)); done </tmp/pids; echo started $n`)
	var exit, started int
	if _, err := fmt.Sscanf(r.Output[strings.Index(r.Output, "loop exit"):], "loop exit %d\nstarted %d", &exit, &started); err != nil {
		t.Fatalf("%v: %q", err, r.Output)
	}
	if exit == 0 || !strings.Contains(r.Output, "fork") {
		t.Errorf("the fork loop was not stopped: %q", r.Output)
	}
	// The agent and its shells hold a few of the 64.
	if started >= 64 || started < 40 {
		t.Errorf("the loop started %d processes under a limit of 64", started)
	}
	// The sandbox and the host carry on.
	if !healthy(sb.AgentAddr, 2*time.Second) {
		t.Error("sandbox stopped answering at its pids limit")
	}
	if got := mustRun(t, sb.AgentAddr, "echo ok"); got != "ok\n" {
		t.Errorf("after the loop: %q", got)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the host cannot fork: %v", err)
	}
}

// dial asks the agent at from to open a TCP connection to addr.
func dial(t *testing.T, from, addr string) error {
	t.Helper()
	resp, err := httpClient.Get("http://" + from + "/dial?addr=" + url.QueryEscape(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

func TestSandboxesCannotReachEachOther(t *testing.T) {
	b := newTestBackend(t)
	a := startSandbox(t, b, testSpec(newID("a")))
	c := startSandbox(t, b, testSpec(newID("c")))

	if err := dial(t, a.AgentAddr, "127.0.0.1:49983"); err != nil {
		t.Errorf("sandbox a cannot reach its own loopback: %v", err)
	}
	if err := dial(t, a.AgentAddr, c.AgentAddr); err == nil {
		t.Errorf("sandbox a reached sandbox c at %s", c.AgentAddr)
	}
	if err := dial(t, c.AgentAddr, a.AgentAddr); err == nil {
		t.Errorf("sandbox c reached sandbox a at %s", a.AgentAddr)
	}
	// Both still answer the host.
	for _, sb := range []*backend.Sandbox{a, c} {
		if !healthy(sb.AgentAddr, 2*time.Second) {
			t.Errorf("%s stopped answering", sb.ID)
		}
	}
}

func TestFailedStartLeavesNothing(t *testing.T) {
	b := newTestBackend(t)
	notExec := filepath.Join(t.TempDir(), "not-a-binary")
	if err := os.WriteFile(notExec, []byte("just text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*backend.Spec)
		ctx    func() (context.Context, context.CancelFunc)
		want   error
	}{
		{name: "missing rootfs", mutate: func(s *backend.Spec) { s.RootFS = "/nonexistent/rootfs" }, want: errdefs.ErrNotFound},
		{name: "missing agent", mutate: func(s *backend.Spec) { s.Agent.Path = "/nonexistent/agent" }, want: errdefs.ErrNotFound},
		{name: "relative rootfs", mutate: func(s *backend.Spec) { s.RootFS = "rootfs" }, want: errdefs.ErrInvalidArgument},
		{name: "bad id", mutate: func(s *backend.Spec) { s.ID = "Bad_ID" }, want: errdefs.ErrInvalidArgument},
		{name: "tiny memory", mutate: func(s *backend.Spec) { s.Resources.MemoryBytes = 1 << 20 }, want: errdefs.ErrInvalidArgument},
		// These get as far as runsc, which fails; the undo must remove
		// the network, the cgroup and runsc's state.
		{name: "agent not executable", mutate: func(s *backend.Spec) { s.Agent.Path = notExec }},
		{name: "agent path is a directory", mutate: func(s *backend.Spec) { s.Agent.Path = t.TempDir() }, want: errdefs.ErrInvalidArgument},
		{name: "context ends after 5ms", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 5*time.Millisecond)
		}, want: context.DeadlineExceeded},
		{name: "context ends after 40ms", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 40*time.Millisecond)
		}, want: context.DeadlineExceeded},
		{name: "context ends after 90ms", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 90*time.Millisecond)
		}, want: context.DeadlineExceeded},
		{name: "context ends after 130ms", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 130*time.Millisecond)
		}, want: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(newID("fail"))
			if tt.mutate != nil {
				tt.mutate(spec)
			}
			ctx, cancel := context.Background(), func() {}
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			sb, err := b.Start(ctx, spec)
			if err == nil {
				// A start may beat the deadline; that is no failure to test.
				b.Stop(context.Background(), spec.ID)
				if tt.ctx == nil {
					t.Fatalf("Start = %+v, want an error", sb)
				}
				t.Skip("the start beat the deadline")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Start = %v, want %v", err, tt.want)
			}
			t.Logf("Start: %v", err)
			if network := spec.ID; network == "Bad_ID" {
				return
			}
			assertNothingLeft(t, b, spec.ID)
		})
	}
}

func TestStartStopCycles(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	const cycles = 20
	var starts, stops time.Duration
	ids := make([]string, 0, cycles)
	for i := range cycles {
		id := newID(fmt.Sprint("cycle", i))
		ids = append(ids, id)
		t0 := time.Now()
		sb, err := b.Start(ctx, testSpec(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := waitHealthy(sb.AgentAddr, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := b.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		starts += t1.Sub(t0)
		stops += time.Since(t1)
	}
	t.Logf("mean start to health %v, stop %v", starts/cycles, stops/cycles)
	for _, id := range ids {
		assertNothingLeft(t, b, id)
	}
	entries, err := os.ReadDir(b.Sandboxes)
	if err != nil || len(entries) != 0 {
		t.Errorf("sandboxes dir holds %d entries (%v)", len(entries), err)
	}
}

// TestRestartFindsSandboxes checks what a daemon sees after a crash: a new
// Backend on the same Root lists the sandboxes of the old one, reports their
// state, and stops them cleanly, leftovers included.
func TestRestartFindsSandboxes(t *testing.T) {
	old := newTestBackend(t)
	ctx := context.Background()
	running := newID("kept")
	startSandbox(t, old, testSpec(running))

	// A Start that crashed after making the network only.
	partial := newID("partial")
	if _, err := old.Pool.Setup(ctx, partial, nil); err != nil {
		t.Fatal(err)
	}

	b, err := New(old.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{running, partial}; !sameSet(ids, want) {
		t.Errorf("List = %v, want %v", ids, want)
	}
	if st, err := b.State(ctx, running); err != nil || st != backend.StateRunning {
		t.Errorf("State(%s) = %q, %v; want running", running, st, err)
	}
	if st, err := b.State(ctx, partial); err != nil || st != backend.StateStopped {
		t.Errorf("State(%s) = %q, %v; want stopped", partial, st, err)
	}
	for _, id := range ids {
		if err := b.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, b, id)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestOpenByName(t *testing.T) {
	requireSandboxes(t)
	be, err := backend.Open("gvisor", backend.Config{
		Root:    t.TempDir(),
		Options: map[string]string{"platform": "systrap", "debug": "false"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := be.(backend.Pauser); !ok {
		t.Error("the gvisor backend is no Pauser")
	}
	if _, ok := be.(backend.StatsReader); !ok {
		t.Error("the gvisor backend is no StatsReader")
	}
	if ids, err := be.List(context.Background()); err != nil || len(ids) != 0 {
		t.Errorf("List of a new backend = %v, %v", ids, err)
	}
}

func TestStopPausedSandbox(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	id := newID("paused")
	startSandbox(t, b, testSpec(id))
	if err := b.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, b, id)
}

// TestDiskCap fills a sandbox's root and /tmp: both share the cap, the
// writes fail with ENOSPC inside, the host's file system loses no more than
// the cap, and the sandbox lives on.
func TestDiskCap(t *testing.T) {
	const capBytes = 64 << 20
	// The backend's root on a file system of the test's own, whose free
	// space no other test moves.
	b := newTestBackend(t, func(c *Config) { c.Root = testutil.ScratchFS(t, 512<<20) })
	id := newID("disk")
	spec := testSpec(id)
	spec.Resources.DiskBytes = capBytes
	sb := startSandbox(t, b, spec)
	free := func() int64 { return testutil.FreeBytes(t, b.cfg.Root) }
	before := free()
	mustRun(t, sb.AgentAddr, "mkdir -p /home/user")
	for _, fill := range []string{
		"dd if=/dev/zero of=/home/user/big bs=1M count=128",
		"dd if=/dev/zero of=/tmp/big bs=1M count=128",
		"cat /dev/zero > /tmp/big2",
	} {
		r := run(t, sb.AgentAddr, fill)
		if r.Exit == 0 || !strings.Contains(r.Output, "No space left on device") {
			t.Errorf("%s under a 64 MiB cap: exit %d: %q", fill, r.Exit, r.Output)
		}
	}
	// The home took most of the cap, /tmp got the rest: both count.
	out := mustRun(t, sb.AgentAddr, "du -k /home/user/big /tmp/big /tmp/big2 | awk '{s+=$1} END {print s}'")
	used, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatal(out)
	}
	if used<<10 > capBytes || used<<10 < capBytes-8<<20 {
		t.Errorf("the sandbox's files hold %d KiB, want just under the %d KiB cap", used, capBytes>>10)
	}
	// Slack: the file system's own metadata and the sandbox's log.
	const slack = 8 << 20
	drop := before - free()
	t.Logf("the host's free space dropped by %.1f MiB under a %d MiB cap", float64(drop)/(1<<20), capBytes>>20)
	if drop > capBytes+slack {
		t.Errorf("the host lost %d MiB to a sandbox capped at %d MiB", drop>>20, capBytes>>20)
	}
	if got := mustRun(t, sb.AgentAddr, "echo alive"); got != "alive\n" {
		t.Errorf("echo alive = %q", got)
	}
	mustRun(t, sb.AgentAddr, "rm /home/user/big /tmp/big /tmp/big2 && dd if=/dev/zero of=/tmp/again bs=1M count=32")

	// The console is a host file that root in the sandbox can write to:
	// it is capped too.
	before = free()
	r := run(t, sb.AgentAddr, "head -c 134217728 /dev/zero | cat >> /proc/1/fd/2")
	if r.Exit == 0 || !strings.Contains(r.Output, "space") {
		t.Errorf("128 MiB into the console: exit %d: %q; want ENOSPC", r.Exit, r.Output)
	}
	if fi, err := os.Stat(oci.ConsolePath(b.BundleDir(id))); err != nil || fi.Size() > oci.LogSize {
		t.Errorf("console after the flood: %v, %v; want at most %d bytes", fi, err, oci.LogSize)
	}
	if drop := before - free(); drop > slack {
		t.Errorf("the host lost %d MiB to a console flood", drop>>20)
	}
	if got := mustRun(t, sb.AgentAddr, "echo alive"); got != "alive\n" {
		t.Errorf("echo alive after the console flood = %q", got)
	}
}

func TestConcurrentStarts(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	sbs := make([]*backend.Sandbox, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = b.Start(ctx, testSpec(newID(fmt.Sprint("conc", i))))
			if errs[i] == nil {
				errs[i] = waitHealthy(sbs[i].AgentAddr, 10*time.Second)
			}
		}()
	}
	wg.Wait()
	addrs := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Error(err)
			continue
		}
		if addrs[sbs[i].AgentAddr] {
			t.Errorf("two sandboxes at %s", sbs[i].AgentAddr)
		}
		addrs[sbs[i].AgentAddr] = true
	}
	for _, sb := range sbs {
		if sb == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Stop(ctx, sb.ID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, sb := range sbs {
		if sb != nil {
			assertNothingLeft(t, b, sb.ID)
		}
	}
}

// mountOptions returns the per-mount options of the mount at path, from
// /proc/self/mountinfo; it fails the test when nothing is mounted there.
func mountOptions(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == path {
			opts = f[5] // the last mount stacked there wins
		}
	}
	if opts == "" {
		t.Fatalf("nothing is mounted at %s", path)
	}
	return opts
}

// TestStopsLegacyTmpMount stops a sandbox whose bundle has the /tmp
// directory an earlier version bind-mounted onto itself, as a daemon
// upgraded while its sandboxes ran finds them.
func TestStopsLegacyTmpMount(t *testing.T) {
	b := newTestBackend(t)
	id := newID("legacy")
	startSandbox(t, b, testSpec(id))
	tmp := filepath.Join(b.BundleDir(id), legacyTmpDir)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(tmp, tmp, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, b, id)
}
