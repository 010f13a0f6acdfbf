package gvisor

import (
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lightbearco/tupper/backend"
)

// AgentPath is where the agent binary appears inside every sandbox.
const AgentPath = backend.AgentMountDir + "/tupper-agent"

// defaultPath is the agent's PATH when Spec.Env sets none, so that the
// commands it starts are found.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Host tasks per sandbox task, and the sentry's own. Under systrap every
// task inside the sandbox is backed by host tasks (about 2.5 per process
// measured here, plus ~25 for the sentry and gofer at rest). The sandbox's
// Pids limit is enforced inside by RLIMIT_NPROC, where a fork fails with
// EAGAIN; the host cgroup's pids.max is only the backstop that keeps the
// host safe if the sentry's accounting is ever bypassed. Hitting it kills
// the whole sandbox, so it must sit well above the inner limit, which
// counts per uid: root and the `user` account may each reach it.
const (
	hostTasksPerTask = 8
	hostTasksBase    = 256
)

// limits are a sandbox's resolved resource limits.
type limits struct {
	CPUs        float64
	MemoryBytes int64
	Pids        int64
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
	if !hasEnv(env, "PATH") {
		env = append(env, defaultPath)
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = s.ID
	}
	nproc := uint64(in.Limits.Pids)
	mem := in.Limits.MemoryBytes
	hostPids := in.Limits.Pids*hostTasksPerTask + hostTasksBase
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
	return &specs.Spec{
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
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: nproc, Soft: nproc}},
		},
		Root:     &specs.Root{Path: in.RootPath, Readonly: false},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			// /dev/shm is memory and counts towards the memory limit, as on Linux.
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
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
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return true
		}
	}
	return false
}

// cgroupsPath returns the cgroup of sandbox id, absolute in each hierarchy.
func cgroupsPath(parent, id string) string {
	return path.Join("/", parent, id)
}
