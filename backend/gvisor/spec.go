package gvisor

import (
	"fmt"
	"path"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
)

// AgentPath is where the agent binary appears inside every sandbox.
const AgentPath = backend.AgentMountDir + "/tupper-agent"

// defaultPath is the agent's PATH when Spec.Env sets none, so that the
// commands it starts are found.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Host tasks per sandbox task, and the sentry's own. Under systrap a
// sandbox's tasks run on host tasks: a stub process per address space, a
// stub thread per task running in it, and the sentry's and the gofer's
// threads (about 20 at rest, hundreds when a fork bomb churns). Stubs are
// never killed: when an address space goes, its stub waits in a pool for
// the next. And the sentry makes the child's address space, so its stub,
// before it checks the task limits: a fork that fails with EAGAIN held a
// stub too, and so does an exec beside the address space it replaces. So
// the host tasks of a sandbox of n tasks grow past 2n under churn.
// Measured at a limit of 1024 tasks, once they stop growing: 2,080 (2.0
// per task) for a loop of `sleep &`; 3,517 to 3,617 (3.5) for bash's
// `bomb | bomb &` at the sandbox's limit, of which 3,177 stubs and 436
// sentry threads; 3,926 (3.8) for the same bomb beside a sandbox spinning
// on every core, whose contention keeps more forks in flight. So 5 per
// task and 512, with a quarter to spare over the worst seen.
// The sandbox's Pids limit is enforced inside, with EAGAIN at fork:
// pids.max of the sandbox's own cgroup for all users together, and
// RLIMIT_NPROC per user, which the agent lowers by 64 so that no one user
// fills the sandbox (see cmd/tupper-agent's limitTasks); the host cgroup's
// pids.max, hostPids, is the backstop that keeps the host safe if that is
// bypassed (root inside can raise its cgroup's pids.max or switch uids).
// Hitting it ends the whole sandbox: the sentry cannot make a thread.
// See docs/design/limits.md.
const (
	hostTasksPerTask = 5
	hostTasksBase    = 512
)

// The host memory cgroup sits above the sandbox's memory limit by a
// headroom, so that the agent's out-of-memory killer (agent/oom), which
// acts on gVisor's own count at the limit, ends one process before the
// host's OOM killer, the backstop, would end the whole sandbox. The
// headroom holds what gVisor does not count as the sandbox's memory: the
// sentry's own heap, page tables and the kernel memory of its host tasks
// (about 94 KiB per host task measured: 290 MiB for 3,100 tasks), and
// what a process allocates between two looks of the killer and its kill.
const (
	headroomBase    = 64 << 20
	headroomDivisor = 8        // plus 1/8 of the limit
	headroomPerTask = 96 << 10 // per host task the sandbox may hold
)

// sandboxOOMScoreAdj is the oom_score_adj runsc gives a sandbox's sentry
// and gofer on the host: should the host run out of memory, its kernel
// ends a sandbox before the host's own services, and before the daemon,
// which lowers its own (and which its children, runsc among them, would
// otherwise inherit). Inside, gVisor shows every process the same figure
// to start with, which shifts all scores alike (agent/oom).
var sandboxOOMScoreAdj = 500

// Open files per process: Linux's usual soft limit, which select(2)-era
// programs rely on, and a hard limit a process may raise it to.
const (
	openFilesSoft = 1024
	openFilesHard = 65536
)

// limits are a sandbox's resolved resource limits.
type limits struct {
	CPUs        float64
	MemoryBytes int64
	Pids        int64
}

// hostPids is the host cgroup's pids.max for the sandbox: the backstop
// under the Pids limit inside (see hostTasksPerTask).
func (l limits) hostPids() int64 {
	return l.Pids*hostTasksPerTask + hostTasksBase
}

// hostMemory is the host cgroup's memory limit for the sandbox: its
// memory limit plus the headroom (see headroomBase).
func (l limits) hostMemory() int64 {
	return l.MemoryBytes + headroomBase + l.MemoryBytes/headroomDivisor + l.hostPids()*headroomPerTask
}

// resolveLimits fills the zero fields of r from cfg's defaults.
func resolveLimits(cfg *Config, r backend.Resources) limits {
	l := limits{CPUs: r.CPUs, MemoryBytes: r.MemoryBytes, Pids: r.Pids}
	if l.CPUs == 0 {
		l.CPUs = cfg.DefaultCPUs
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = cfg.DefaultMemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = cfg.DefaultPids
	}
	return l
}

// specInput is what buildSpec needs beyond the backend.Spec.
type specInput struct {
	Spec        *backend.Spec
	RootPath    string // the sandbox's root: the host overlay of Spec.RootFS
	Limits      limits
	NetNSPath   string
	CgroupsPath string
	LimitSwap   bool // set memory+swap to the memory limit: the host swaps
}

// capabilities are Docker's defaults without CAP_NET_RAW (gVisor drops it
// unless --net-raw). CAP_SYS_ADMIN and CAP_SYS_RESOURCE stay out above all:
// either would lift RLIMIT_NPROC, which enforces the Pids limit.
var capabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_SETFCAP", "CAP_SETGID",
	"CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// buildSpec returns the OCI spec of a sandbox: the agent as its process,
// the shared image as its root, its own namespaces and limits.
//
// The root is not marked read-only, although the sandbox never writes to
// it: runsc puts its copy-on-write overlay (--overlay2, see overlayFlag)
// only on a writable root, and then serves the root read-only itself.
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
	nproc := uint64(in.Limits.Pids)
	// The spec carries the sandbox's own memory limit: runsc shows it
	// inside as MemTotal, which is what the agent's out-of-memory killer
	// holds the sandbox to. The host cgroup gets hostMemory once runsc
	// has read it (see setHostMemory).
	mem := in.Limits.MemoryBytes
	hostPids := in.Limits.hostPids()
	period := uint64(100_000)
	quota := int64(in.Limits.CPUs * float64(period))
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem},
		Pids:   &specs.LinuxPids{Limit: &hostPids},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
	}
	if in.LimitSwap {
		swap := mem
		res.Memory.Swap = &swap
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: 0, GID: 0},
			Args:     append([]string{AgentPath}, s.Agent.Args...),
			Env:      env,
			Cwd:      "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  capabilities,
				Effective: capabilities,
				Permitted: capabilities,
			},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NPROC", Hard: nproc, Soft: nproc},
				{Type: "RLIMIT_NOFILE", Hard: openFilesHard, Soft: openFilesSoft},
			},
			OOMScoreAdj: &sandboxOOMScoreAdj,
		},
		Root:     &specs.Root{Path: in.RootPath, Readonly: false},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			// /dev/shm is memory and counts towards the memory limit, as on
			// Linux. Killing processes does not free it, so it holds at
			// most half the limit, as Linux's default does with RAM: the
			// out-of-memory killer can always make room.
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%dk", mem/2>>10)}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// The sandbox's own cgroups, inside gVisor: the agent writes
			// the Pids limit into pids.max for the whole sandbox, and
			// programs that size themselves by their cgroup (Node, the
			// JVM) read the memory limit there.
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// No /tmp: it is the root's, in the sandbox's capped layer on
			// disk (see tmpPlaceholder for what keeps runsc's memory
			// tmpfs off it).
			{Destination: AgentPath, Type: "bind", Source: s.Agent.Path, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: in.CgroupsPath,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: in.NetNSPath},
			},
		},
	}
	addVolumes(spec, s.Mounts)
	return spec
}

// mountHintPrefix starts runsc's annotations that tell it more about a
// mount than the OCI spec can (runsc/boot/mount_hints.go):
// <prefix><name>.source, .type and .share.
const mountHintPrefix = "dev.gvisor.spec.mount."

// addVolumes binds each of mounts into the sandbox, read-write, after the
// mounts above (a volume at a path under one of them lands on it).
//
// runsc caches what a sandbox looks up in its files, and a volume is
// changed by other sandboxes and by the host. Each volume gets a mount
// hint with share "shared": runsc then serves it with its gofer in
// cache=remote_revalidating mode, which checks its cache against the host
// on every lookup, so that a write in one sandbox is seen by the next
// read in another. That is runsc's default for mounts other than the
// root (--file-access-mounts=shared); the hint keeps it so whatever flags
// the operator adds. One hint per host directory: runsc refuses two with
// one source.
func addVolumes(spec *specs.Spec, mounts []backend.Mount) {
	hinted := map[string]bool{}
	for i, m := range mounts {
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: m.Destination, Type: "bind", Source: m.Source,
			Options: []string{"rbind", "rw", "nosuid", "nodev"},
		})
		if hinted[m.Source] {
			continue
		}
		hinted[m.Source] = true
		if spec.Annotations == nil {
			spec.Annotations = map[string]string{}
		}
		name := mountHintPrefix + "tuppervolume" + strconv.Itoa(i)
		spec.Annotations[name+".source"] = m.Source
		spec.Annotations[name+".type"] = "bind"
		spec.Annotations[name+".share"] = "shared"
	}
}

// cgroupsPath returns the cgroup of sandbox id, absolute in each hierarchy.
func cgroupsPath(parent, id string) string {
	return path.Join("/", parent, id)
}
