package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend/internal/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The benchmarks set the backend's figures beside plain runsc's on the same
// machine:
//
//	BenchmarkStartToHealth   Backend.Start until the agent first answers /health
//	BenchmarkExecRoundTrip   one /exec of `true` through the test agent
//	BenchmarkHealthRoundTrip one /health: the network path alone
//	BenchmarkRawRunscRun     `runsc run` of /bin/true: no network, no overlay, no agent
//	BenchmarkRawRunscExec    `runsc exec` of /bin/true into a running container

func BenchmarkStartToHealth(b *testing.B) {
	be := newTestBackend(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		id := newID(fmt.Sprint("bench", i))
		sb, err := be.Start(ctx, testSpec(id))
		if err != nil {
			b.Fatal(err)
		}
		if err := waitHealthy(sb.AgentAddr, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := be.Stop(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkExecRoundTrip(b *testing.B) {
	be := newTestBackend(b)
	sb := startSandbox(b, be, testSpec(newID("bexec")))
	for b.Loop() {
		if r, err := tryRun(sb.AgentAddr, "true"); err != nil || r.Exit != 0 {
			b.Fatalf("exec: %+v %v", r, err)
		}
	}
}

func BenchmarkHealthRoundTrip(b *testing.B) {
	be := newTestBackend(b)
	sb := startSandbox(b, be, testSpec(newID("bhealth")))
	c := &http.Client{}
	for b.Loop() {
		resp, err := c.Get("http://" + sb.AgentAddr + "/health")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// rawBundle writes a bundle that runs args in the busybox image, read-only,
// with no network.
func rawBundle(b *testing.B, args ...string) string {
	b.Helper()
	dir := b.TempDir()
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: args,
			Env:  []string{"PATH=/bin"},
			Cwd:  "/",
		},
		Root:   &specs.Root{Path: testRootFS, Readonly: true},
		Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		b.Fatal(err)
	}
	return dir
}

func rawRunsc(b *testing.B, root string, args ...string) {
	b.Helper()
	runsc, err := FindRunsc()
	if err != nil {
		b.Fatal(err)
	}
	full := append([]string{"--root", root, "--network=none", "--platform=systrap", "--shared-root=" + DefaultSharedRoot}, args...)
	// A file, not a pipe: a detached container keeps its stdio open.
	out, err := os.CreateTemp(root, "out-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.Command(runsc, full...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b.Fatalf("runsc %v: %v: %s", args, err, oci.Tail(out.Name(), 2048))
	}
}

func BenchmarkRawRunscRun(b *testing.B) {
	requireSandboxes(b)
	bundle := rawBundle(b, "/bin/true")
	root := b.TempDir()
	for i := 0; b.Loop(); i++ {
		rawRunsc(b, root, "run", "--bundle", bundle, newID(fmt.Sprint("raw", i)))
	}
}

func BenchmarkRawRunscExec(b *testing.B) {
	requireSandboxes(b)
	bundle := rawBundle(b, "/bin/sleep", "3600")
	root := b.TempDir()
	id := newID("rawexec")
	rawRunsc(b, root, "run", "--detach", "--bundle", bundle, id)
	b.Cleanup(func() { rawRunsc(b, root, "delete", "--force", id) })
	for b.Loop() {
		rawRunsc(b, root, "exec", id, "/bin/true")
	}
}

// The pause figures: the backend's checkpoint and restore of a sandbox
// (its network, overlay and agent included) beside runsc's own of a bare
// container, on the same machine.
//
//	BenchmarkPause            Backend.Checkpoint without keep: saved, stopped, freed
//	BenchmarkResume           Backend.Restore until the agent answers /health
//	BenchmarkRawRunscCheckpoint `runsc checkpoint` of a bare `sleep` container
//	BenchmarkRawRunscRestore  `runsc restore --detach` of that checkpoint

func BenchmarkPause(b *testing.B) {
	be := newTestBackend(b)
	ctx := context.Background()
	base := b.TempDir()
	var saved, held int64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		id := newID(fmt.Sprint("bpause", i))
		startSandbox(b, be, testSpec(id))
		if st, err := be.Stats(ctx, id); err == nil {
			held = int64(st.MemoryUsageBytes)
		}
		dir := filepath.Join(base, id)
		b.StartTimer()
		if err := be.Checkpoint(ctx, id, dir, false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		saved = dirBytes(b, dir)
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(held), "running-host-bytes")
	b.ReportMetric(float64(saved), "checkpoint-bytes")
}

func BenchmarkResume(b *testing.B) {
	be := newTestBackend(b)
	ctx := context.Background()
	id := newID("bresume")
	startSandbox(b, be, testSpec(id))
	dir := filepath.Join(b.TempDir(), "ckpt")
	if err := be.Checkpoint(ctx, id, dir, false); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sb, err := be.Restore(ctx, testSpec(id), dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitHealthy(sb.AgentAddr, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := be.Stop(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkRawRunscCheckpoint(b *testing.B) {
	requireSandboxes(b)
	bundle := rawBundle(b, "/bin/sleep", "3600")
	root, base := b.TempDir(), b.TempDir()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		id := newID(fmt.Sprint("rawckpt", i))
		rawRunsc(b, root, "run", "--detach", "--bundle", bundle, id)
		b.StartTimer()
		rawRunsc(b, root, "checkpoint", "--image-path", filepath.Join(base, id), id)
		b.StopTimer()
		rawRunsc(b, root, "delete", "--force", id)
		b.StartTimer()
	}
}

func BenchmarkRawRunscRestore(b *testing.B) {
	requireSandboxes(b)
	bundle := rawBundle(b, "/bin/sleep", "3600")
	root := b.TempDir()
	image := filepath.Join(b.TempDir(), "ckpt")
	src := newID("rawsrc")
	rawRunsc(b, root, "run", "--detach", "--bundle", bundle, src)
	rawRunsc(b, root, "checkpoint", "--image-path", image, src)
	rawRunsc(b, root, "delete", "--force", src)
	for i := 0; b.Loop(); i++ {
		id := newID(fmt.Sprint("rawrest", i))
		rawRunsc(b, root, "restore", "--detach", "--image-path", image, "--bundle", bundle, id)
		b.StopTimer()
		rawRunsc(b, root, "delete", "--force", id)
		b.StartTimer()
	}
}

// dirBytes is what the files under dir take.
func dirBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
