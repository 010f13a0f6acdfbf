package firecracker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend/internal/oci"
)

// cgroupHost is where the host's cpu and memory controllers are.
type cgroupHost struct {
	// Version is 2 when the unified hierarchy holds both controllers,
	// else 1.
	Version int
	// CPU and Memory are the mount points of the v1 hierarchies of the
	// controllers, or both the unified hierarchy's.
	CPU, Memory string
	// CPUAcct is the mount point of the v1 hierarchy of the cpuacct
	// controller, which counts CPU time: often CPU's own (cpu,cpuacct),
	// sometimes a hierarchy of its own, empty when the host has none.
	// Unused on v2, where cpu.stat counts it.
	CPUAcct string
}

// findCgroups finds the hierarchies of the cpu and memory controllers: v1
// ones where the host mounts them (their limits' files are in their
// roots), else the unified v2 hierarchy that has them enabled.
func findCgroups() (cgroupHost, error) {
	mounts, err := oci.CgroupMounts()
	if err != nil {
		return cgroupHost{}, err
	}
	var h cgroupHost
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "cpu.cfs_quota_us")); err == nil && h.CPU == "" {
			h.CPU = m
		}
		if _, err := os.Stat(filepath.Join(m, "memory.limit_in_bytes")); err == nil && h.Memory == "" {
			h.Memory = m
		}
		if _, err := os.Stat(filepath.Join(m, "cpuacct.usage")); err == nil && h.CPUAcct == "" {
			h.CPUAcct = m
		}
	}
	if h.CPU != "" && h.Memory != "" {
		h.Version = 1
		return h, nil
	}
	for _, m := range mounts {
		b, err := os.ReadFile(filepath.Join(m, "cgroup.controllers"))
		if err != nil {
			continue
		}
		have := strings.Fields(string(b))
		if contains(have, "cpu") && contains(have, "memory") {
			return cgroupHost{Version: 2, CPU: m, Memory: m}, nil
		}
	}
	return cgroupHost{}, errors.New("no cgroup hierarchy with the cpu and memory controllers (v1 mounts or the v2 one)")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// acctDir is the directory of cgroup rel in the v1 cpuacct hierarchy when
// that hierarchy is neither the cpu nor the memory one, else "". The
// jailer makes the VMM's cgroup only in the hierarchies of the files it
// writes, and cpuacct has none it could (cpuacct.usage takes only 0, and
// the jailer first copies the parent's value into it): the backend makes
// that one itself, so that the VMM's CPU time is counted apart.
func (h cgroupHost) acctDir(rel string) string {
	if h.Version != 1 || h.CPUAcct == "" || h.CPUAcct == h.CPU || h.CPUAcct == h.Memory {
		return ""
	}
	return filepath.Join(h.CPUAcct, rel)
}

// makeVMMCgroup makes cgroup rel in the hierarchies of h with limits, as
// the jailer would, and in a cpuacct hierarchy of its own (see acctDir),
// and returns its directories. On v2 it first enables the controllers for
// the cgroups on the way down.
func makeVMMCgroup(h cgroupHost, rel string, limits []cgroupLimit) ([]string, error) {
	dirs := []string{filepath.Join(h.CPU, rel)}
	if h.Memory != h.CPU {
		dirs = append(dirs, filepath.Join(h.Memory, rel))
	}
	if d := h.acctDir(rel); d != "" {
		dirs = append(dirs, d)
	}
	if h.Version == 2 {
		parts := strings.Split(strings.Trim(rel, "/"), "/")
		p := h.CPU
		for _, part := range parts {
			if err := os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte("+cpu +memory"), 0); err != nil {
				return nil, fmt.Errorf("cgroup %s: enable cpu and memory: %w", p, err)
			}
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, err
			}
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	for _, l := range limits {
		dir := filepath.Join(h.CPU, rel)
		if strings.HasPrefix(l.File, "memory.") {
			dir = filepath.Join(h.Memory, rel)
		}
		if err := os.WriteFile(filepath.Join(dir, l.File), []byte(l.Value), 0); err != nil {
			return dirs, fmt.Errorf("cgroup %s: %s=%s: %w", dir, l.File, l.Value, err)
		}
	}
	return dirs, nil
}

// joinAcctCgroup puts the jailed VMM pid in cgroup rel of the cpuacct
// hierarchy, when that one is apart (see acctDir). The jailer becomes
// Firecracker in place, so the pid is the VMM's from its start; threads
// it makes later are born there.
func joinAcctCgroup(h cgroupHost, rel string, pid int) error {
	d := h.acctDir(rel)
	if d == "" {
		return nil
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return joinCgroup([]string{d}, pid)
}

// joinCgroup moves process pid (all its threads) into the cgroup
// directories dirs.
func joinCgroup(dirs []string, pid int) error {
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d: %w", d, pid, err)
		}
	}
	return nil
}

// drainCgroup waits up to grace for the processes in cgroup rel to exit
// on their own and reports whether they did; it is what the VMM's
// helpers get to finish (the tests' stand-in cleans up after its VMM
// process is killed).
func drainCgroup(rel string, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for {
		dirs, err := oci.CgroupDirs(rel)
		if err != nil {
			return false
		}
		busy := false
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				busy = true
			}
		}
		if !busy {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
