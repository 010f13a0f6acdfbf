package apple

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
)

// Fixes the self-check suggests.
const (
	fixInstall = "install container 1.0 or later (the signed .pkg of https://github.com/apple/container/releases), then run `container system start --enable-kernel-install`"
	fixStart   = "run `container system start --enable-kernel-install` (it installs the default Linux kernel the first time)"
	fixMacOS   = "Apple's containers need a Mac with Apple silicon on macOS 26 or later: on macOS 15 the Mac cannot reach its containers' addresses, where the agent listens; elsewhere, point the client at a Tupper daemon on such a host (TUPPER_API_URL)"
)

// checkTimeout bounds each command the self-check runs.
const checkTimeout = 15 * time.Second

// host is what the self-check knows of the machine.
type host struct {
	goos, goarch string
	// macOS is the product version ("26.1") on macOS; err says why it
	// is unknown.
	macOS    string
	macOSErr error
}

// check is the Apple backend's self-check (`tupper doctor`): the Mac, the
// `container` CLI and its version, and its services.
func check(ctx context.Context) []backend.Finding {
	return checkHost(ctx, DefaultCLI, thisHost())
}

func checkHost(ctx context.Context, cliName string, h host) []backend.Finding {
	out := []backend.Finding{macFinding(h)}
	cliF := backend.Finding{What: "container CLI"}
	path, err := exec.LookPath(cliName)
	if err != nil {
		cliF.Detail, cliF.Fix = fmt.Sprintf("%s is not on $PATH", cliName), fixInstall
		return append(out, cliF, limitsFinding(), egressFinding())
	}
	c := &cli{path: path}
	vctx, cancel := context.WithTimeout(ctx, checkTimeout)
	v, err := c.run(vctx, "--version")
	cancel()
	if err == nil {
		var ver version
		if ver, err = parseVersion(v); err == nil {
			cliF.Detail = fmt.Sprintf("%s: version %s", path, ver)
			if cliF.OK = ver.atLeast(1, 0); !cliF.OK {
				cliF.Detail += ", older than 1.0"
				cliF.Fix = "upgrade: " + fixInstall
			}
		}
	}
	if err != nil {
		cliF.Detail, cliF.Fix = fmt.Sprintf("%s does not tell its version: %v", path, err), fixInstall
	}
	out = append(out, cliF)

	sysF := backend.Finding{What: "container services"}
	sctx, cancel := context.WithTimeout(ctx, checkTimeout)
	// It prints the status as JSON and exits 1 when the services are down.
	status, serr := c.run(sctx, "system", "status", "--format", "json")
	cancel()
	if s, err := parseSystemStatus(status); err == nil {
		sysF.Detail, sysF.OK = s, s == "running"
	} else if serr != nil {
		sysF.Detail = serr.Error()
	} else {
		sysF.Detail = err.Error()
	}
	if !sysF.OK {
		sysF.Fix = fixStart
	}
	return append(out, sysF, limitsFinding(), egressFinding())
}

// macFinding says whether this is a Mac that runs Apple's containers with
// reachable addresses: Apple silicon, macOS 26 or later.
func macFinding(h host) backend.Finding {
	f := backend.Finding{What: "macOS"}
	switch {
	case h.goos != "darwin":
		f.Detail = "this is " + h.goos + ", not macOS"
	case h.macOSErr != nil:
		f.Detail = "the macOS version is unknown: " + h.macOSErr.Error()
	default:
		major, _ := strconv.Atoi(strings.SplitN(h.macOS, ".", 2)[0])
		f.Detail = fmt.Sprintf("macOS %s on %s", h.macOS, h.goarch)
		f.OK = major >= 26 && h.goarch == "arm64"
	}
	if !f.OK {
		f.Fix = fixMacOS
	}
	return f
}

// limitsFinding says which limits Apple's containers cannot hold.
func limitsFinding() backend.Finding {
	return backend.Finding{What: "disk limit", Optional: true,
		Detail: "`container` has no per-container disk cap: a sandbox's writes are bounded only by the Mac's free space",
		Fix:    "none on this backend; run sandboxes that need a disk cap on a Linux host (gvisor or runc backend)"}
}

// egressFinding says that egress policies are refused.
func egressFinding() backend.Finding {
	return backend.Finding{What: "egress policy", Optional: true,
		Detail: "containers reach whatever the Mac reaches through vmnet's NAT: sandboxes with a network policy are refused, and `--egress off` cannot be honoured",
		Fix:    "none on this backend; run sandboxes that need egress rules on a Linux host (gvisor or runc backend)"}
}

// thisHost describes the machine the program runs on.
func thisHost() host {
	h := host{goos: runtime.GOOS, goarch: runtime.GOARCH}
	if h.goos == "darwin" {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "sw_vers", "-productVersion").Output()
		h.macOS, h.macOSErr = strings.TrimSpace(string(out)), err
	}
	return h
}
