package firecracker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
)

// kvmGetAPIVersion is the KVM_GET_API_VERSION ioctl, _IO(0xAE, 0x00); the
// version has been 12 since Linux 2.6.22.
const (
	kvmGetAPIVersion = 0xAE00
	kvmAPIVersion    = 12
)

// releasesFix says where Firecracker and its jailer come from.
const releasesFix = "download a release of Firecracker (firecracker and jailer of the same version, https://github.com/firecracker-microvm/firecracker/releases) into " + FallbackDir + ", or set "

// check is the Firecracker backend's self-check (`tupper doctor`): KVM,
// the binaries, the guest kernel, mkfs.ext4, root and the cgroup
// controllers. It looks where a backend opened with default options looks.
func check(ctx context.Context) []backend.Finding {
	out := []backend.Finding{kvmFinding()}
	out = append(out, binaryFinding(ctx, "firecracker", FindFirecracker, FirecrackerEnv))
	out = append(out, binaryFinding(ctx, "jailer", FindJailer, JailerEnv))
	out = append(out, kernelFinding(Config{}.withDefaults().KernelDir))
	mkfs := backend.Finding{What: "mkfs.ext4"}
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		mkfs.OK, mkfs.Detail = true, p
	} else {
		mkfs.Detail, mkfs.Fix = err.Error(), "install e2fsprogs (apt-get install e2fsprogs): image disks are made with mkfs.ext4 -d"
	}
	out = append(out, mkfs)
	root := backend.Finding{What: "root", OK: os.Geteuid() == 0, Detail: fmt.Sprintf("uid %d", os.Geteuid())}
	if !root.OK {
		root.Fix = "run tupper serve as root: the jailer, cgroups and image disks with their owners need it"
	}
	out = append(out, root)
	cg := backend.Finding{What: "cgroups"}
	if h, err := findCgroups(); err == nil {
		cg.OK, cg.Detail = true, fmt.Sprintf("v%d: cpu at %s, memory at %s", h.Version, h.CPU, h.Memory)
	} else {
		cg.Detail, cg.Fix = err.Error(), "mount the cpu and memory cgroup controllers (v1) or enable them in the v2 hierarchy: the VMMs' limits need them"
	}
	return append(out, cg)
}

// kvmFinding says whether /dev/kvm opens and answers KVM's API version.
func kvmFinding() backend.Finding {
	f := backend.Finding{What: "/dev/kvm"}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Detail = err.Error()
		f.Fix = "Firecracker needs KVM: enable virtualization (VT-x/AMD-V, or nested virtualization for a VM host), load kvm_intel or kvm_amd, and run as root or a member of the kvm group"
		return f
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		f.Detail, f.Fix = "KVM_GET_API_VERSION: "+err.Error(), "the kvm module answers no API version: reload kvm_intel or kvm_amd"
		return f
	}
	f.Detail = fmt.Sprintf("KVM API version %d", v)
	f.OK = v == kvmAPIVersion
	if !f.OK {
		f.Fix = fmt.Sprintf("KVM API version %d is not the %d Firecracker uses", v, kvmAPIVersion)
	}
	return f
}

// binaryFinding says whether a binary is found and runs --version.
func binaryFinding(ctx context.Context, name string, find func() (string, error), env string) backend.Finding {
	f := backend.Finding{What: name}
	p, err := find()
	if err != nil {
		f.Detail, f.Fix = err.Error(), releasesFix+env
		return f
	}
	f.Detail = p
	v, err := exec.CommandContext(ctx, p, "--version").CombinedOutput()
	if err != nil {
		f.Detail += fmt.Sprintf(": does not run: %v", err)
		f.Fix = "replace it with a working release: " + releasesFix + env
		return f
	}
	line := strings.SplitN(strings.TrimSpace(string(v)), "\n", 2)[0]
	f.Detail += ": " + line
	if major, minor, ok := releaseOf(line); ok && (major < 1 || major == 1 && minor < minMinor) {
		f.Fix = fmt.Sprintf("Firecracker 1.%d or later finds a guest's devices through ACPI, which Debian's kernel needs, and loads snapshots as this backend makes them: %s%s", minMinor, releasesFix, env)
		return f
	}
	f.OK = true
	return f
}

// minMinor is the oldest Firecracker 1.x release the backend takes.
const minMinor = 8

// releaseOf reads "v1.16.1" out of a --version line ("Firecracker v1.16.1",
// "Jailer v1.16.1").
func releaseOf(line string) (major, minor int, ok bool) {
	for _, f := range strings.Fields(line) {
		if n, _ := fmt.Sscanf(f, "v%d.%d", &major, &minor); n == 2 {
			return major, minor, true
		}
	}
	return 0, 0, false
}

// kernelFinding says whether dir holds a guest kernel and loadable
// modules.
func kernelFinding(dir string) backend.Finding {
	f := backend.Finding{What: "guest kernel"}
	fix := "make one with backend/firecracker/guest-kernel.sh " + dir + " (Debian's cloud kernel, see the script), or put an uncompressed vmlinux with virtio-mmio, virtio-blk, ext4, overlayfs and vsock built in at " + filepath.Join(dir, kernelName) + "; set " + KernelEnv + " or the kernel option for another directory"
	vmlinux := filepath.Join(dir, kernelName)
	head := make([]byte, 4)
	k, err := os.Open(vmlinux)
	if err == nil {
		_, err = k.Read(head)
		k.Close()
	}
	switch {
	case err != nil:
		f.Detail, f.Fix = err.Error(), fix
		return f
	case !bytes.Equal(head, []byte("\x7fELF")):
		f.Detail, f.Fix = vmlinux+" is no ELF file (a compressed bzImage?)", fix
		return f
	}
	mods, err := readModules(filepath.Join(dir, "modules"))
	if err != nil {
		f.Detail, f.Fix = err.Error(), fix
		return f
	}
	f.OK = true
	f.Detail = fmt.Sprintf("%s with %d modules", vmlinux, len(mods))
	return f
}
