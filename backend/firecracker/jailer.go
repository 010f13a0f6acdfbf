package firecracker

import (
	"path"
	"path/filepath"
	"strconv"
)

// Paths of the VMM's files as Firecracker sees them.
const (
	// Jailed, in the root of its chroot.
	jailAPISock = "/api.sock"
	// Not jailed, relative to its working directory, the sandbox's
	// directory: unix socket paths are short that way, however deep
	// Config.Root is.
	apiSockName   = "api.sock"
	vsockName     = "v.sock"
	rwDiskName    = "rw.ext4"
	baseDiskName  = "base.ext4"
	kernelName    = "vmlinux"
	initramfsName = "initramfs.cpio"
)

// cpuPeriod is the CFS period of the VMM's cpu quota, in microseconds.
const cpuPeriod = 100_000

// vmmOverheadBytes is what the VMM may use beyond the guest's memory
// before its cgroup's limit: Firecracker's own heap, threads and page
// tables (it claims under 5 MiB) and the page cache of the disk writes
// it makes, which the kernel can reclaim.
const vmmOverheadBytes = 64 << 20

// cgroupLimit is one cgroup file and its value.
type cgroupLimit struct{ File, Value string }

// vmmLimits returns the cgroup settings that hold the VMM of a sandbox to
// cpus cores and memBytes of guest memory, for cgroup version 1 or 2.
func vmmLimits(version int, cpus float64, memBytes int64) []cgroupLimit {
	quota := max(int64(cpus*cpuPeriod), 1000)
	mem := strconv.FormatInt(memBytes+vmmOverheadBytes, 10)
	if version == 2 {
		return []cgroupLimit{
			{"cpu.max", strconv.FormatInt(quota, 10) + " " + strconv.Itoa(cpuPeriod)},
			{"memory.max", mem},
		}
	}
	return []cgroupLimit{
		// The period before the quota: the kernel checks the quota
		// against the period in place.
		{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
		{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)},
		{"memory.limit_in_bytes", mem},
	}
}

// firecrackerArgs are Firecracker's arguments when it runs without the
// jailer, in the sandbox's directory.
func firecrackerArgs(firecracker, id string) []string {
	return []string{firecracker, "--api-sock", apiSockName, "--id", id}
}

// jailerSpec is what the jailer's command line says.
type jailerSpec struct {
	Jailer, Firecracker string
	ID                  string
	UID, GID            int
	ChrootBase          string
	CgroupVersion       int
	CgroupParent        string
	Limits              []cgroupLimit
}

// jailerArgs returns the jailer's command line (docs/jailer.md of
// Firecracker): it makes the chroot <ChrootBase>/<exec name>/<id>/root,
// the cgroup <CgroupParent>/<id> with the limits, drops to uid and gid and
// executes Firecracker there, which serves its API on /api.sock of the
// chroot. Without --daemonize and --new-pid-ns the jailer becomes
// Firecracker: the pid started is the VMM's.
func jailerArgs(j jailerSpec) []string {
	args := []string{
		j.Jailer,
		"--id", j.ID,
		"--exec-file", j.Firecracker,
		"--uid", strconv.Itoa(j.UID),
		"--gid", strconv.Itoa(j.GID),
		"--chroot-base-dir", j.ChrootBase,
		"--cgroup-version", strconv.Itoa(j.CgroupVersion),
		"--parent-cgroup", j.CgroupParent,
	}
	for _, l := range j.Limits {
		args = append(args, "--cgroup", l.File+"="+l.Value)
	}
	return append(args, "--", "--api-sock", jailAPISock)
}

// chrootRoot is the root of the jailer's chroot of sandbox id: the jailer
// names it after the Firecracker binary's file name.
func chrootRoot(chrootBase, firecracker, id string) string {
	return filepath.Join(chrootBase, filepath.Base(firecracker), id, "root")
}

// cgroupRel is the cgroup of sandbox id's VMM, relative to a hierarchy's
// root: the jailer's <parent-cgroup>/<id>, and the backend's own without
// the jailer.
func cgroupRel(parent, id string) string { return path.Join("/", parent, id) }
