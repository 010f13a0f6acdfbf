package firecracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend"
)

func findingOf(t *testing.T, fs []backend.Finding, what string) backend.Finding {
	t.Helper()
	for _, f := range fs {
		if f.What == what {
			return f
		}
	}
	t.Fatalf("no finding %q in %+v", what, fs)
	return backend.Finding{}
}

// TestCheck runs the self-check with the stand-in as firecracker, no
// jailer, and kernel directories good and bad: every failure says what to
// do.
func TestCheck(t *testing.T) {
	t.Setenv(FirecrackerEnv, standIn(t))
	t.Setenv(JailerEnv, filepath.Join(t.TempDir(), "no-jailer"))
	t.Setenv(KernelEnv, fakeKernelDir(t))
	fs := check(t.Context())
	for _, f := range fs {
		if !f.OK && f.Fix == "" {
			t.Errorf("%s fails without a fix: %+v", f.What, f)
		}
	}
	if f := findingOf(t, fs, "firecracker"); !f.OK || !strings.Contains(f.Detail, "stand-in") {
		t.Errorf("firecracker: %+v, want it found and its version", f)
	}
	if f := findingOf(t, fs, "jailer"); f.OK || !strings.Contains(f.Fix, JailerEnv) {
		t.Errorf("jailer: %+v, want a failure that names %s", f, JailerEnv)
	}
	if f := findingOf(t, fs, "guest kernel"); !f.OK || !strings.Contains(f.Detail, "0 modules") {
		t.Errorf("guest kernel: %+v", f)
	}
	kvm := findingOf(t, fs, "/dev/kvm")
	if _, err := os.Stat("/dev/kvm"); err != nil && kvm.OK {
		t.Errorf("/dev/kvm is OK without /dev/kvm: %+v", kvm)
	}

	bz := t.TempDir()
	os.WriteFile(filepath.Join(bz, kernelName), []byte("MZ\x00\x00 a bzImage"), 0o644)
	if f := kernelFinding(bz); f.OK || !strings.Contains(f.Detail, "no ELF") || !strings.Contains(f.Fix, "guest-kernel.sh") {
		t.Errorf("a compressed kernel: %+v", f)
	}
	if f := kernelFinding(filepath.Join(bz, "none")); f.OK || f.Fix == "" {
		t.Errorf("no kernel: %+v", f)
	}
	broken := fakeKernelDir(t)
	os.Mkdir(filepath.Join(broken, "modules"), 0o755)
	writeModule(t, filepath.Join(broken, "modules"), "virtio_blk.ko", "depends=virtio", "name=virtio_blk")
	if f := kernelFinding(broken); f.OK || !strings.Contains(f.Detail, "needs virtio") {
		t.Errorf("a module without its dependency: %+v", f)
	}
}
