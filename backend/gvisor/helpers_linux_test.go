package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/network"
)

// Built once per test binary by TestMain, when root and runsc are there.
var (
	testRootFS string // a busybox root filesystem
	testAgent  string // internal/testagent, static
	testSkip   string // why the tests that need a sandbox skip, if they do
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if v := os.Getenv(crashStartEnv); v != "" {
		return runCrashStart(v)
	}
	dir, err := os.MkdirTemp("", "tupper-gvisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	switch {
	case os.Geteuid() != 0:
		testSkip = "needs root for runsc, cgroups and network namespaces"
	default:
		if _, err := FindRunsc(); err != nil {
			testSkip = fmt.Sprintf("runsc not found: %v (set %s)", err, RunscEnv)
			break
		}
		if testRootFS, err = buildBusyboxRootFS(filepath.Join(dir, "rootfs")); err != nil {
			testSkip = fmt.Sprintf("no busybox root filesystem: %v (install busybox-static)", err)
			break
		}
		if testAgent, err = buildTestAgent(filepath.Join(dir, "agent")); err != nil {
			fmt.Fprintln(os.Stderr, "building the test agent:", err)
			return 1
		}
	}
	return m.Run()
}

// buildBusyboxRootFS makes a tiny root filesystem at dir: the static
// busybox, a symlink per applet, and a few files the tests look at.
func buildBusyboxRootFS(dir string) (string, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", err
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return "", err
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return "", err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			return "", err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
		"etc/motd":   "the shared image\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// buildTestAgent builds the stand-in agent, static.
func buildTestAgent(dir string) (string, error) {
	out := filepath.Join(dir, "tupper-agent")
	cmd := exec.Command("go", "build", "-o", out, "./internal/testagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, b)
	}
	return out, nil
}

func requireSandboxes(tb testing.TB) {
	tb.Helper()
	if testSkip != "" {
		testutil.Skip(tb, testSkip)
	}
}

// newTestBackend makes a Backend in a fresh Root. At the end of the test it
// stops whatever the backend still holds.
func newTestBackend(tb testing.TB, mutate ...func(*Config)) *Backend {
	tb.Helper()
	requireSandboxes(tb)
	level := slog.LevelWarn
	if os.Getenv("TUPPER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg := Config{
		Root:   tb.TempDir(),
		Logger: slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: level})),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	backendtest.StopOnCleanup(tb, b)
	return b
}

type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newID returns a sandbox id that no other test or process uses.
func newID(name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "gt-" + name + "-" + hex.EncodeToString(b)
}

func testSpec(id string) *backend.Spec {
	return &backend.Spec{
		ID:     id,
		RootFS: testRootFS,
		Agent:  backend.Agent{Path: testAgent},
		Env:    []string{"PATH=/bin", "TUPPER_TEST=1"},
	}
}

// startSandbox starts spec, waits for its agent, and stops it when the
// test ends.
func startSandbox(tb testing.TB, b *Backend, spec *backend.Spec) *backend.Sandbox {
	tb.Helper()
	sb, err := b.Start(context.Background(), spec)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Stop(context.Background(), spec.ID) })
	if err := waitHealthy(sb.AgentAddr, 10*time.Second); err != nil {
		tb.Fatalf("agent of %s at %s: %v\nconsole:\n%s", spec.ID, sb.AgentAddr, err,
			oci.Tail(oci.ConsolePath(b.BundleDir(spec.ID)), 4096))
	}
	return sb
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// waitHealthy polls the agent's /health until it answers 204.
func waitHealthy(addr string, within time.Duration) error {
	c := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		resp, err := c.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("not healthy within %v: %w", within, last)
}

// healthy reports whether the agent answers within timeout.
func healthy(addr string, timeout time.Duration) bool {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent
}

type execResult struct {
	Output string `json:"output"`
	Exit   int    `json:"exit"`
}

// run runs cmd with /bin/sh inside the sandbox through the test agent.
func run(tb testing.TB, addr, cmd string) execResult {
	tb.Helper()
	r, err := tryRun(addr, cmd)
	if err != nil {
		tb.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

func tryRun(addr, cmd string) (execResult, error) {
	resp, err := httpClient.Get("http://" + addr + "/exec?cmd=" + url.QueryEscape(cmd))
	if err != nil {
		return execResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return execResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return execResult{}, fmt.Errorf("status %s: %s", resp.Status, body)
	}
	var r execResult
	if err := json.Unmarshal(body, &r); err != nil {
		return execResult{}, fmt.Errorf("%w: %s", err, body)
	}
	return r, nil
}

// mustRun runs cmd and fails the test unless it exits 0.
func mustRun(tb testing.TB, addr, cmd string) string {
	tb.Helper()
	r := run(tb, addr, cmd)
	if r.Exit != 0 {
		tb.Fatalf("exec %q: exit %d: %s", cmd, r.Exit, r.Output)
	}
	return r.Output
}

// hashTree hashes every name, mode, link target and content under dir.
func hashTree(tb testing.TB, dir string) string {
	tb.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s %v %d %d\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintln(h, target)
		case fi.Mode().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// assertNothingLeft fails tb if anything of sandbox id remains on the host.
func assertNothingLeft(tb testing.TB, b *Backend, id string) {
	tb.Helper()
	// Processes: runsc puts the id on the command line of the sandbox
	// and gofer processes.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		for _, arg := range bytes.Split(data, []byte{0}) {
			if strings.Contains(string(arg), id) {
				tb.Errorf("process %s still runs for %s: %q", filepath.Dir(p), id, bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
				break
			}
		}
	}
	// Mounts.
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], id) {
			tb.Errorf("mount left for %s: %s", id, line)
		}
	}
	// Network namespace, veth, lease.
	if _, err := os.Lstat(b.Pool.NetNSPath(id)); !errors.Is(err, fs.ErrNotExist) {
		tb.Errorf("netns of %s left: %v", id, err)
	}
	ifName := network.HostIfName(network.DefaultIfPrefix, b.cfg.Network.Dir, id)
	if _, err := netlink.LinkByName(ifName); err == nil {
		tb.Errorf("veth %s of %s left", ifName, id)
	}
	if _, err := b.Pool.Lookup(id); err == nil {
		tb.Errorf("network lease of %s left", id)
	}
	// Cgroups.
	if dirs, err := oci.CgroupDirs(cgroupsPath(b.cfg.CgroupParent, id)); err != nil || len(dirs) > 0 {
		tb.Errorf("cgroups of %s left: %v %v", id, dirs, err)
	}
	// runsc state.
	ids, err := b.IDs(context.Background())
	if err != nil {
		tb.Error(err)
	}
	if slices.Contains(ids, id) {
		tb.Errorf("runsc still lists %s", id)
	}
	state, _ := os.ReadDir(filepath.Join(b.cfg.Root, "runsc"))
	for _, e := range state {
		if strings.Contains(e.Name(), id) {
			tb.Errorf("runsc state file %s left", e.Name())
		}
	}
	// Bundle.
	if _, err := os.Lstat(b.BundleDir(id)); !errors.Is(err, fs.ErrNotExist) {
		tb.Errorf("bundle dir of %s left: %v", id, err)
	}
	listed, err := b.List(context.Background())
	if err != nil {
		tb.Error(err)
	}
	if slices.Contains(listed, id) {
		tb.Errorf("List still reports %s", id)
	}
}
