package apple

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

func realRootFS(t *testing.T) string {
	if root := os.Getenv("TUPPER_TEST_ROOTFS"); root != "" {
		return root
	}
	return testutil.TestRootFS(t)
}

// sandboxStandin returns a stand-in in its sandbox mode, whose containers
// are runc sandboxes, skipping the test where those cannot run.
func sandboxStandin(t *testing.T, env ...string) *standin {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "the stand-in runs runc sandboxes, which need root")
	}
	if _, err := runc.FindRunc(); err != nil {
		testutil.Skip(t, fmt.Sprintf("runc not found: %v (scripts/setup.sh installs it)", err))
	}
	s := newStandin(t, env...)
	t.Cleanup(func() { checkStandinEmpty(t, s) })
	return s
}

// checkStandinEmpty checks that the stand-in holds no container and its
// runc backend no sandbox: the apple backend removed all it made.
func checkStandinEmpty(t *testing.T, s *standin) {
	t.Helper()
	if left := s.containers(t); len(left) != 0 {
		t.Errorf("containers left in the stand-in: %q", left)
	}
	if left, _ := os.ReadDir(filepath.Join(s.dir, "runc", "sandboxes")); len(left) != 0 {
		t.Errorf("runc sandboxes left under the stand-in: %v", left)
	}
}

func newStandinBackend(t *testing.T, s *standin) *Backend {
	t.Helper()
	b, err := New(Config{
		Root: t.TempDir(), CLI: s.path, Arch: runtime.GOARCH,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, b) })
	return b
}

// testConformanceStandin runs the suite against the backend driving the
// stand-in CLI, whose containers are runc sandboxes of the Debian test
// image: every code path of the backend runs, against a CLI that speaks
// as `container` 1.x does.
func testConformanceStandin(t *testing.T) {
	s := sandboxStandin(t)
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend { return newStandinBackend(t, s) },
		RootFS:     testutil.TestRootFS(t),
		AgentPath:  agentBinary(t, runtime.GOARCH),
		Crash:      func(t *testing.T, id string) { crashStandin(t, s, id) },
		NoDiskCap:  noDiskCap,
	})
}

// crashStandin kills every host process of container id's runc sandbox,
// as a crash would; the stand-in then finds the container stopped.
func crashStandin(t *testing.T, s *standin, id string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "containers", id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Sandbox string }
	if err := json.Unmarshal(b, &c); err != nil || c.Sandbox == "" {
		t.Fatalf("container %s has no sandbox: %v", id, err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	killed := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/"+runc.DefaultCgroupParent+"/"+c.Sandbox+"\n") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no host process of container %s (sandbox %s) found", id, c.Sandbox)
	}
}

// waitAgent waits for the agent at addr to answer GET /health.
func waitAgent(t *testing.T, addr string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	testutil.WaitFor(t, 20*time.Second, "the agent at "+addr+" to answer", func() bool {
		resp, err := client.Get("http://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	})
}

// TestStandinOlderShapes boots a real sandbox through the JSON of the
// versions before 1.0, which the stand-in speaks when told to.
func TestStandinOlderShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots sandboxes")
	}
	root := testutil.TestRootFS(t)
	for _, shape := range []string{"0.8", "0.7"} {
		t.Run(shape, func(t *testing.T) {
			s := sandboxStandin(t, envShapeVar+"="+shape)
			b := newStandinBackend(t, s)
			ctx := ctxT(t)
			spec := &backend.Spec{ID: "shape" + strings.ReplaceAll(shape, ".", ""), RootFS: root,
				Agent: backend.Agent{Path: agentBinary(t, runtime.GOARCH), Args: []string{"--addr", ":49983"}}}
			sb, err := b.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			waitAgent(t, sb.AgentAddr)
			if st, err := b.State(ctx, spec.ID); err != nil || st != backend.StateRunning {
				t.Errorf("State = %q, %v", st, err)
			}
			if ids, err := b.List(ctx); err != nil || !slices.Equal(ids, []string{spec.ID}) {
				t.Errorf("List = %q, %v", ids, err)
			}
			if err := b.Stop(ctx, spec.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStartFromStoreImage boots a sandbox from an image of the image store
// (Spec.Image: its manifest, config and compressed layers, as the engine
// hands them over), which the stand-in imports into a store of its own:
// the archive the backend writes from a real image is one Tupper's own
// importer takes.
func TestStartFromStoreImage(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots a sandbox")
	}
	storeRoot, name := testutil.TestImage(t)
	st, err := image.Open(image.Config{Root: storeRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	img, err := st.Resolve(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	s := sandboxStandin(t)
	b := newStandinBackend(t, s)
	ctx := ctxT(t)
	// No RootFS: a Mac's store keeps images as their layers only.
	spec := &backend.Spec{ID: "fromstore", Image: engine.BackendImage(img),
		Agent: backend.Agent{Path: agentBinary(t, runtime.GOARCH), Args: []string{"--addr", ":49983"}}}
	sb, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitAgent(t, sb.AgentAddr)
	ref, _ := imageRef(spec)
	if out := s.run(t, "image", "list", "--format", "json"); !strings.Contains(out, ref) {
		t.Errorf("`container image list` = %s; want %s in it", out, ref)
	}
	if err := b.Stop(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
}
