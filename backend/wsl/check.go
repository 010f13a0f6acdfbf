package wsl

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/backend"
)

// check is the WSL backend's self-check (`tupper doctor`): wsl.exe, its
// version, WSL 2 as the default, and, plainly, what WSL sandboxes do not
// keep apart.
func check(ctx context.Context) []backend.Finding {
	path, err := FindWSL()
	if err != nil {
		return []backend.Finding{{What: "wsl.exe", Detail: err.Error(),
			Fix: "install WSL on Windows 11 (`wsl --install --no-distribution` in an administrator's terminal, then restart), or set " + WSLEnv}}
	}
	c := &cli{path: path}
	out := []backend.Finding{{What: "wsl.exe", OK: true, Detail: path}}
	out = append(out, versionFinding(ctx, c), defaultVersionFinding(ctx, c))
	return append(out, caveats()...)
}

// versionFinding checks that wsl.exe is a WSL 2 release from the Store (or
// its MSI), which `wsl --version` tells; the inbox wsl.exe of Windows 10
// does not know --version.
func versionFinding(ctx context.Context, c *cli) backend.Finding {
	f := backend.Finding{What: "WSL version"}
	text, err := c.run(ctx, nil, versionArgs...)
	if err != nil {
		f.Detail = fmt.Sprintf("`wsl --version` failed, as the inbox WSL of Windows 10 does: %v", err)
		f.Fix = "wsl --update"
		return f
	}
	v, err := parseVersion(text)
	if err != nil {
		f.Detail, f.Fix = err.Error(), "wsl --update"
		return f
	}
	f.Detail = "WSL " + v.WSL
	if v.Kernel != "" {
		f.Detail += ", kernel " + v.Kernel
	}
	if v.Windows != "" {
		f.Detail += ", Windows " + v.Windows
	}
	f.OK = versionAtLeast(v.WSL, 2, 0)
	if !f.OK {
		f.Fix = "wsl --update (the backend needs WSL 2.0 or later)"
	}
	return f
}

// defaultVersionFinding reports the default WSL version. The backend asks
// for version 2 on every import, so a default of 1 does not stop it; a
// host that cannot run WSL 2 at all fails at the first import instead.
func defaultVersionFinding(ctx context.Context, c *cli) backend.Finding {
	f := backend.Finding{What: "WSL default version", Optional: true}
	text, err := c.run(ctx, nil, statusArgs...)
	if err == nil {
		var v int
		if v, err = parseStatus(text); err == nil {
			f.Detail = fmt.Sprintf("%d", v)
			f.OK = v == 2
		}
	}
	if err != nil {
		f.Detail = err.Error()
	}
	if !f.OK {
		f.Fix = "wsl --set-default-version 2 (sandboxes are imported as WSL 2 either way; WSL 2 needs virtualization on in the firmware and the Virtual Machine Platform feature)"
	}
	return f
}

// caveats says what WSL sandboxes share, as findings that do not stop the
// backend from working but that the operator must know.
func caveats() []backend.Finding {
	return []backend.Finding{
		{What: "isolation", Optional: true,
			Detail: "all WSL 2 distributions run in one VM on one Linux kernel: a sandbox is kept from Windows (interop, drive mounts and \\\\wsl$ are off) but not from the other sandboxes, nor from your own distributions; root in any of them holds the whole VM",
			Fix:    "run code you do not trust on a Linux host with the gvisor backend"},
		{What: "network", Optional: true,
			Detail: "the VM has one network namespace: each agent (and code interpreter) gets a port of its own, but any other server in a sandbox listens in the space all share, where another sandbox can reach it and where only one sandbox can hold a port; egress cannot be limited",
			Fix:    "give servers in sandboxes ports no other sandbox uses"},
		{What: "limits", Optional: true,
			Detail: "no per-sandbox CPU or memory limit (.wslconfig's memory and processors hold the whole VM); tasks are capped per user with RLIMIT_NPROC, counted across the VM and not binding root; disk by the distribution's disk size where `wsl --manage --resize` is available",
			Fix:    "set memory= and processors= in %UserProfile%\\.wslconfig for all sandboxes together"},
	}
}
