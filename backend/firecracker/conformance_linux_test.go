package firecracker

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/internal/testutil"
)

// realPlatform reports whether this host can run real Firecracker microVMs
// (KVM, firecracker and jailer, a guest kernel), and if not, why not.
func realPlatform() (bool, string) {
	var missing []string
	if f := kvmFinding(); !f.OK {
		missing = append(missing, "/dev/kvm: "+f.Detail)
	}
	if _, err := FindFirecracker(); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := FindJailer(); err != nil {
		missing = append(missing, err.Error())
	}
	if f := kernelFinding(Config{}.withDefaults().KernelDir); !f.OK {
		missing = append(missing, "guest kernel: "+f.Detail)
	}
	if len(missing) == 0 {
		return true, ""
	}
	why := ""
	for i, m := range missing {
		if i > 0 {
			why += "; "
		}
		why += m
	}
	return false, why
}

// TestConformance runs the shared conformance suite against real
// Firecracker microVMs where the host has them (or TUPPER_TEST_BACKEND
// says firecracker, which makes their absence a failure), and otherwise
// against the stand-in (internal/fakefirecracker), which runs the agent
// in a runc sandbox behind Firecracker's API and vsock handshake, so that
// every code path of the backend runs end to end.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the conformance suite boots sandboxes")
	}
	real, why := realPlatform()
	asked := os.Getenv("TUPPER_TEST_BACKEND") == "firecracker"
	t.Run("firecracker", func(t *testing.T) {
		if !real {
			if asked {
				t.Fatalf("TUPPER_TEST_BACKEND=firecracker, but this host cannot run Firecracker: %s", why)
			}
			t.Skip("NOT RUN: real Firecracker: " + why)
		}
		if os.Geteuid() != 0 {
			testutil.Skip(t, "needs root for the jailer, cgroups and image disks")
		}
		runConformance(t, func(t *testing.T) *Backend {
			b, err := New(Config{Root: t.TempDir(), Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopAll(t, b) })
			return b
		})
	})
	t.Run("stand-in", func(t *testing.T) {
		if real {
			t.Skip("the real Firecracker ran")
		}
		runConformance(t, func(t *testing.T) *Backend { return newStandInBackend(t) })
	})
}

func runConformance(t *testing.T, newBackend func(t *testing.T) *Backend) {
	var (
		b   *Backend
		rec *startRecorder
	)
	// Registered first, so run last: once every sandbox is stopped,
	// nothing of any may be left.
	t.Cleanup(func() {
		if rec == nil {
			return
		}
		for _, id := range rec.ids {
			noLeftovers(t, b, id)
		}
	})
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend {
			b = newBackend(t)
			rec = &startRecorder{Backend: b}
			return rec
		},
		RootFS:    testutil.TestRootFS(t),
		AgentPath: testutil.AgentBinary(t),
		// A crash is the VMM's end: the guest goes with it.
		Crash: func(t *testing.T, id string) {
			b.crashVMM(t, id)
		},
	})
}

// crashVMM kills sandbox id's VMM as a crash would.
func (b *Backend) crashVMM(t testing.TB, id string) {
	t.Helper()
	pid, err := oci.ReadPid(filepath.Join(b.sandboxDir(id), pidFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the VMM of %s (pid %d): %v", id, pid, err)
	}
}
