package runc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/lightbearco/tupper/backend"
	"golang.org/x/sys/unix"
)

// check is the runc backend's self-check (`tupper doctor`): runc, root,
// mkfs.ext4 for the sandboxes' disks, and the kernel features the
// hardening needs. It also says what this tier is: a container, sharing
// the host's kernel.
func check(ctx context.Context) []backend.Finding {
	var out []backend.Finding
	if p, err := FindRunc(); err != nil {
		out = append(out, backend.Finding{What: "runc", Detail: err.Error(), Fix: "apt-get install runc (scripts/setup.sh does), or set " + RuncEnv})
	} else {
		f := backend.Finding{What: "runc", OK: true, Detail: p}
		if v, err := exec.CommandContext(ctx, p, "--version").Output(); err == nil {
			f.Detail += ": " + strings.SplitN(strings.TrimSpace(string(v)), "\n", 2)[0]
		} else {
			f.OK, f.Detail, f.Fix = false, fmt.Sprintf("%s does not run: %v", p, err), "reinstall it: apt-get install --reinstall runc"
		}
		out = append(out, f)
	}
	root := backend.Finding{What: "root", OK: os.Geteuid() == 0, Detail: fmt.Sprintf("uid %d", os.Geteuid())}
	if !root.OK {
		root.Fix = "run tupper serve as root: it makes user and network namespaces, idmapped mounts and cgroups"
	}
	out = append(out, root)
	mkfs := backend.Finding{What: "mkfs.ext4"}
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		mkfs.OK, mkfs.Detail = true, p
	} else {
		mkfs.Detail, mkfs.Fix = "not found: each sandbox's disk is an ext4 file system", "apt-get install e2fsprogs"
	}
	out = append(out, mkfs)
	userns := backend.Finding{What: "user namespaces"}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) != "0" {
		userns.OK, userns.Detail = true, "max_user_namespaces "+strings.TrimSpace(string(b))
	} else {
		userns.Detail, userns.Fix = "turned off", "sysctl -w user.max_user_namespaces=15000"
	}
	out = append(out, userns)
	out = append(out, kernelFinding())
	shield := backend.Finding{What: "OOM shield", Optional: true, OK: hasCapSysResource()}
	if shield.OK {
		shield.Detail = "the kernel's OOM killer never picks a sandbox's agent"
	} else {
		shield.Detail = "no CAP_SYS_RESOURCE: a sandbox's agent can be the OOM killer's pick, which ends its sandbox"
		shield.Fix = "run tupper serve with CAP_SYS_RESOURCE (a container that drops it cannot shield agents)"
	}
	out = append(out, shield)
	return append(out, backend.Finding{What: "isolation", OK: true, Optional: true,
		Detail: "a container: sandboxes share the host's kernel (hardened with a user namespace, seccomp and no capabilities beyond Docker's defaults); gvisor puts a kernel of its own between them"})
}

// kernelFinding says whether the kernel has what the root of a sandbox is
// made with: idmapped mounts under an overlay, from Linux 5.19.
func kernelFinding() backend.Finding {
	f := backend.Finding{What: "kernel"}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		f.Detail = err.Error()
		return f
	}
	release := unix.ByteSliceToString(u.Release[:])
	f.Detail = release
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	f.OK = major > 5 || major == 5 && minor >= 19
	if !f.OK {
		f.Fix = "Linux 5.19 or later: sandboxes see the image through an idmapped mount under an overlay"
	}
	return f
}
