package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/backend"
)

// check is the gVisor backend's self-check (`tupper doctor`): runsc, root,
// the cgroup controllers limits need, and the host's task budget.
func check(ctx context.Context) []backend.Finding {
	var out []backend.Finding
	if runsc, err := FindRunsc(); err != nil {
		out = append(out, backend.Finding{What: "runsc", Detail: err.Error(),
			Fix: "run scripts/setup.sh (or `make run`), which builds runsc at the pinned version, or set " + RunscEnv})
	} else {
		f := backend.Finding{What: "runsc", OK: true, Detail: runsc}
		if v, err := exec.CommandContext(ctx, runsc, "--version").Output(); err == nil {
			line := strings.SplitN(strings.TrimSpace(string(v)), "\n", 2)[0]
			if strings.Contains(line, "VERSION_MISSING") {
				line = "runs (built with go install, so it carries no version)"
			}
			f.Detail += ": " + line
		} else {
			f.OK, f.Detail, f.Fix = false, fmt.Sprintf("%s does not run: %v", runsc, err), "rebuild it with scripts/setup.sh"
		}
		out = append(out, f)
	}
	root := backend.Finding{What: "root", OK: os.Geteuid() == 0, Detail: fmt.Sprintf("uid %d", os.Geteuid())}
	if !root.OK {
		root.Fix = "run tupper serve as root: it makes network namespaces, cgroups and mounts"
	}
	out = append(out, root)

	out = append(out, cgroupFinding())

	pidMax := backend.Finding{What: "kernel.pid_max", Optional: true}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pidMax.Detail = strconv.Itoa(n)
		pidMax.OK = n >= 4194304
		if !pidMax.OK {
			pidMax.Fix = "sysctl -w kernel.pid_max=4194304 (systemd's default): every task in a sandbox costs the host one or more, and few sandboxes fit the kernel's 32768"
		}
	} else {
		pidMax.Detail = err.Error()
	}
	return append(out, pidMax)
}

// cgroupFinding says whether the memory, pids and cpu controllers that hold
// a sandbox's limits are there, in v1 hierarchies or the v2 one.
func cgroupFinding() backend.Finding {
	f := backend.Finding{What: "cgroups"}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		have := strings.Fields(string(b))
		f.Detail = "v2: " + strings.Join(have, " ")
		f.OK = containsAll(have, "memory", "pids", "cpu")
	} else {
		var have []string
		for _, c := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat("/sys/fs/cgroup/" + c); err == nil {
				have = append(have, c)
			}
		}
		f.Detail = "v1: " + strings.Join(have, " ")
		f.OK = len(have) == 3
	}
	if !f.OK {
		f.Fix = "mount the memory, pids and cpu cgroup controllers (v1) or enable them in the v2 hierarchy: sandboxes' limits need them"
	}
	return f
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
