package runc

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
)

// AgentPath is where the agent binary appears inside every sandbox.
const AgentPath = backend.AgentMountDir + "/tupper-agent"

// defaultPath is the agent's PATH when Spec.Env sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Open files per process: Linux's usual soft limit and a hard limit a
// process may raise it to.
const (
	openFilesSoft = 1024
	openFilesHard = 65536
)

// tasksReserve is how many of the sandbox's tasks no single user can take:
// RLIMIT_NPROC, which counts a user's tasks (each sandbox's users are host
// users of their own, see idRange), sits that far under the cgroup's
// pids.max, so that a fork bomb stops short and root can still start the
// command that ends it.
const tasksReserve = 64

// capabilities are Docker's defaults without CAP_NET_RAW. They are the
// capabilities of the sandbox's user namespace, none of the host's.
var capabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_SETFCAP", "CAP_SETGID",
	"CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// maskedPaths and readonlyPaths are Docker's: kernel state a container has
// no business reading, and kernel knobs it must not turn.
var (
	maskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
		// The host's network interfaces, other sandboxes' among them
		// (their aliases name them): a sandbox's own are in its
		// namespace, which netlink shows.
		"/sys/class/net", "/sys/devices/virtual/net",
		// Mounted under the host's /sys, which a sandbox sees bound.
		"/sys/kernel/debug", "/sys/kernel/security", "/sys/kernel/tracing", "/sys/fs/bpf",
		"/sys/fs/fuse/connections", "/sys/fs/pstore",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// limits are a sandbox's resolved resource limits.
type limits struct {
	CPUs        float64 `json:"cpus"`
	MemoryBytes int64   `json:"memoryBytes"`
	Pids        int64   `json:"pids"`
	DiskBytes   int64   `json:"diskBytes"`
}

// resolveLimits is r with its zero fields at the package's defaults.
func resolveLimits(r backend.Resources) limits {
	or := func(v, def int64) int64 {
		if v == 0 {
			return def
		}
		return v
	}
	cpus := r.CPUs
	if cpus == 0 {
		cpus = DefaultCPUs
	}
	return limits{CPUs: cpus, MemoryBytes: or(r.MemoryBytes, DefaultMemoryBytes), Pids: or(r.Pids, DefaultPids), DiskBytes: or(r.DiskBytes, DefaultDiskBytes)}
}

// socketBufferBytes is the limit of a sandbox's socket buffers on cgroup
// v1, which charges them to the memory cgroup (in a counter of their own)
// only when it is set: without it, unread data in a sandbox's sockets
// would be the host's memory, up to the host's tcp_mem. A quarter of the
// memory limit, at least 16 MiB, on top of it.
func (l limits) socketBufferBytes() int64 { return max(l.MemoryBytes/4, 16<<20) }

// perUserTasks is RLIMIT_NPROC for a sandbox of pids tasks.
func perUserTasks(pids int64) uint64 {
	return uint64(pids - min(tasksReserve, pids/8))
}

// specInput is what buildSpec needs beyond the backend.Spec.
type specInput struct {
	Spec        *backend.Spec
	RootPath    string
	Limits      limits
	NetNSPath   string
	CgroupsPath string
	HostIDBase  uint32
	LimitSwap   bool
}

// buildSpec returns the OCI spec of a sandbox.
func buildSpec(in specInput) *specs.Spec {
	s := in.Spec
	env := append([]string(nil), s.Env...)
	if !oci.HasEnv(env, "PATH") {
		env = append(env, defaultPath)
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = s.ID
	}
	mem := in.Limits.MemoryBytes
	pids := in.Limits.Pids
	period := uint64(100_000)
	quota := int64(in.Limits.CPUs * float64(period))
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem},
		Pids:   &specs.LinuxPids{Limit: &pids},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		// Deny every device; runc adds back the standard ones (null,
		// zero, full, random, urandom, tty, the pty multiplexer).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if in.LimitSwap {
		swap := mem
		res.Memory.Swap = &swap
	}
	nproc := perUserTasks(pids)
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: in.HostIDBase, Size: idCount}}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            append([]string{AgentPath}, s.Agent.Args...),
			Env:             env,
			Cwd:             "/",
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  capabilities,
				Effective: capabilities,
				Permitted: capabilities,
			},
			Rlimits: []specs.POSIXRlimit{
				capped(unix.RLIMIT_NPROC, "RLIMIT_NPROC", nproc, nproc),
				capped(unix.RLIMIT_NOFILE, "RLIMIT_NOFILE", openFilesSoft, openFilesHard),
			},
		},
		Root:     &specs.Root{Path: in.RootPath},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			// /dev/shm is memory, charged to the sandbox's cgroup; half
			// the limit at most, as Linux's default is half the RAM.
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%dk", mem/2>>10)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			// A new sysfs needs a network namespace that the sandbox's
			// user namespace owns; the sandbox's is made by the host. So
			// /sys is the host's, bound recursively read-only, as rootless
			// containers have it (masked below where Docker masks it).
			{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "rro", "nosuid", "noexec", "nodev"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: AgentPath, Type: "bind", Source: s.Agent.Path, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			// System V shared memory outlives its processes and counts
			// towards the sandbox's memory: at most a quarter of it, so
			// that with a full /dev/shm (half) the processes, the agent
			// first, still have room.
			Sysctl: map[string]string{
				"kernel.shmmax": strconv.FormatInt(mem/4, 10),
				"kernel.shmall": strconv.FormatInt(mem/4/int64(os.Getpagesize()), 10),
			},
			UIDMappings: idmap,
			GIDMappings: idmap,
			CgroupsPath: in.CgroupsPath,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace},
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
				{Type: specs.NetworkNamespace, Path: in.NetNSPath},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
			Seccomp:       seccompProfile(runtime.GOARCH),
		},
	}
	// Volumes, read-write, after the mounts above. Their files keep their
	// host owners, which the sandbox's user namespace does not map (they
	// show as nobody): a volume's top is open to every user for that.
	for _, m := range s.Mounts {
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: m.Destination, Type: "bind", Source: m.Source,
			Options: []string{"rbind", "rw", "nosuid", "nodev"},
		})
	}
	return spec
}

// capped is the rlimit res at soft and hard, lowered to the hard limit of
// this process, which runc's init inherits: in its user namespace, it may
// lower a limit but not raise one.
func capped(res int, name string, soft, hard uint64) specs.POSIXRlimit {
	var cur unix.Rlimit
	if err := unix.Getrlimit(res, &cur); err == nil && cur.Max != unix.RLIM_INFINITY {
		hard = min(hard, cur.Max)
		soft = min(soft, hard)
	}
	return specs.POSIXRlimit{Type: name, Hard: hard, Soft: soft}
}
