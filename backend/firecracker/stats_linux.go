package firecracker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

var _ backend.StatsReader = (*Backend)(nil)

// Stats implements backend.StatsReader from the host side, from the
// VMM's cgroup <CgroupParent>/<id> (the jailer's, or the backend's own):
// a microVM's guest runs on the VMM's threads and in its memory, so the
// VMM's use is the sandbox's.
//
//   - CPUUsageNanos is the cgroup's CPU time: cpu.stat's usage_usec on
//     cgroup v2, cpuacct.usage on v1;
//   - MemoryUsageBytes is the cgroup's memory less its inactive file
//     cache, as `docker stats` counts it: memory.current on v2,
//     memory.usage_in_bytes on v1, less memory.stat's (total_)inactive_file
//     — mostly the guest memory the VMM touched, and its own;
//   - MemoryLimitBytes is the microVM's memory size (the cgroup's limit
//     adds the VMM's overhead);
//   - Pids is 0: the guest's tasks are not visible from the host.
//
// A paused sandbox reports its frozen use. It fails with
// errdefs.ErrNotFound for an id the backend does not hold and
// errdefs.ErrFailedPrecondition once the VMM has exited.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	rec, err := b.readRecord(id)
	if err != nil {
		return nil, err
	}
	if pid, err := oci.ReadPid(filepath.Join(b.sandboxDir(id), pidFile)); err != nil || !alive(pid) || !ownsProcess(pid, id) {
		return nil, fmt.Errorf("sandbox %q: stats: its VMM has exited: %w", id, errdefs.ErrFailedPrecondition)
	}
	rel := cgroupRel(b.cfg.CgroupParent, id)
	h := b.cgroups
	cpuDir, memDir := filepath.Join(h.CPU, rel), filepath.Join(h.Memory, rel)
	if h.Version == 1 {
		if h.CPUAcct == "" {
			return nil, fmt.Errorf("sandbox %q: stats: the host mounts no cpuacct cgroup hierarchy: %w", id, errdefs.ErrUnavailable)
		}
		cpuDir = filepath.Join(h.CPUAcct, rel)
	}
	u, err := readCgroupUsage(h.Version, cpuDir, memDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: stats: %w", id, err)
	}
	return &backend.Stats{
		CPUUsageNanos:    u.cpuNanos,
		MemoryUsageBytes: u.memBytes,
		MemoryLimitBytes: uint64(rec.MemoryMiB) << 20,
	}, nil
}

// cgroupUsage is what a cgroup says of its use.
type cgroupUsage struct {
	cpuNanos uint64
	memBytes uint64
}

// readCgroupUsage reads a cgroup's CPU time from cpuDir and its memory
// use, less inactive file cache, from memDir, for cgroup version 1 or 2
// (where both are the same directory).
func readCgroupUsage(version int, cpuDir, memDir string) (cgroupUsage, error) {
	var u cgroupUsage
	stat, err := readKeyed(filepath.Join(memDir, "memory.stat"))
	if err != nil {
		return u, err
	}
	var mem uint64
	inactive := "inactive_file"
	if version == 2 {
		cpu, err := readKeyed(filepath.Join(cpuDir, "cpu.stat"))
		if err != nil {
			return u, err
		}
		usec, ok := cpu["usage_usec"]
		if !ok {
			return u, fmt.Errorf("%s: no usage_usec", filepath.Join(cpuDir, "cpu.stat"))
		}
		u.cpuNanos = usec * 1000
		if mem, err = readUint(filepath.Join(memDir, "memory.current")); err != nil {
			return u, err
		}
	} else {
		if u.cpuNanos, err = readUint(filepath.Join(cpuDir, "cpuacct.usage")); err != nil {
			return u, err
		}
		if mem, err = readUint(filepath.Join(memDir, "memory.usage_in_bytes")); err != nil {
			return u, err
		}
		// The hierarchical count: the VMM's helpers may sit below.
		inactive = "total_inactive_file"
	}
	if n := stat[inactive]; n < mem {
		mem -= n
	}
	u.memBytes = mem
	return u, nil
}

// readUint reads a cgroup file that holds one number.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// readKeyed reads a cgroup file of "key value" lines (memory.stat,
// cpu.stat).
func readKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		out[k] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
