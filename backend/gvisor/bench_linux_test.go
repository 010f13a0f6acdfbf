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
