package firecracker

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestGuestKernelScript runs guest-kernel.sh as an operator would on a
// fresh Debian host (once per machine: the directory it makes is kept in
// the test cache) and checks what it made: an x86-64 or arm64 ELF kernel
// and real Debian modules that load in an order the backend can compute,
// in an initramfs it can build.
func TestGuestKernelScript(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: downloads a Debian kernel package")
	}
	for _, bin := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, "needs Debian's "+bin)
		}
	}
	dir := filepath.Join(testutil.CacheDir(), "firecracker-kernel")
	if _, err := os.Stat(filepath.Join(dir, "SOURCE")); err != nil || os.Getenv("TUPPER_TEST_KERNEL_SCRIPT") == "1" {
		os.RemoveAll(dir)
		cmd := exec.Command("sh", "guest-kernel.sh", dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("guest-kernel.sh: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	}
	f := kernelFinding(dir)
	if !f.OK {
		t.Fatalf("the kernel it made: %+v", f)
	}
	k, err := elf.Open(filepath.Join(dir, kernelName))
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if k.Type != elf.ET_EXEC || (k.Machine != elf.EM_X86_64 && k.Machine != elf.EM_AARCH64) {
		t.Errorf("vmlinux is a %v for %v", k.Type, k.Machine)
	}
	mods, err := readModules(filepath.Join(dir, "modules"))
	if err != nil {
		t.Fatal(err)
	}
	order := names(mods)
	t.Logf("load order: %v", order)
	pos := func(n string) int { return slices.Index(order, n) }
	for _, need := range []string{"virtio_mmio", "virtio_blk", "vmw_vsock_virtio_transport", "overlay"} {
		if pos(need) < 0 {
			t.Errorf("%s missing from %v", need, order)
		}
	}
	for _, m := range mods {
		for _, d := range m.Depends {
			if pos(d) > pos(m.Name) {
				t.Errorf("%s loads before %s, which it needs", m.Name, d)
			}
		}
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, testutil.AgentBinary(t), mods); err != nil {
		t.Fatal(err)
	}
	for _, e := range readCPIO(t, buf.Bytes()) {
		if e.Name == "modules/order" && strings.Count(e.Data, "\n") != len(mods) {
			t.Errorf("modules/order %q", e.Data)
		}
	}
	source, _ := os.ReadFile(filepath.Join(dir, "SOURCE"))
	if !strings.HasPrefix(string(source), "package linux-image-") || !strings.Contains(string(source), "vmlinux") {
		t.Errorf("SOURCE:\n%s", source)
	}
}
