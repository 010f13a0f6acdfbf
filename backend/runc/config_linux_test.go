package runc

import (
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

func TestConfigValidate(t *testing.T) {
	good := []Config{
		{Root: "/var/lib/tupper/backends/runc"},
		{Root: "/r", CgroupParent: "a/b", RunDir: "/run/x"},
		{Root: "/r", Network: network.Config{Subnet: netip.MustParsePrefix("10.50.0.0/20")}},
	}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := map[string]Config{
		"no root":          {},
		"relative root":    {Root: "state"},
		"relative run dir": {Root: "/r", RunDir: "run"},
		"relative runc":    {Root: "/r", RuncPath: "runc"},
		"cgroup escapes":   {Root: "/r", CgroupParent: "a/../../b"},
		"absolute cgroup":  {Root: "/r", CgroupParent: "/a"},
		// Each /30 of the pool is a sandbox's slot of 65,536 host ids.
		"pool above a /16": {Root: "/r", Network: network.Config{Subnet: netip.MustParsePrefix("10.0.0.0/8")}},
	}
	for name, c := range bad {
		if err := c.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestHostIDRanges checks that every /30 of the pool maps onto a range of
// host ids of its own, above the host's users, and that the last fits in
// a uid.
func TestHostIDRanges(t *testing.T) {
	b := &Backend{cfg: Config{Root: "/r"}.withDefaults()}
	seen := map[uint32]bool{}
	first, err := b.hostIDBase(netip.MustParsePrefix("10.214.0.2/30"))
	if err != nil || first != idBase {
		t.Fatalf("first block: %d, %v; want %d", first, err, idBase)
	}
	for _, a := range []string{"10.214.0.2/30", "10.214.0.6/30", "10.214.1.2/30", "10.214.255.254/30"} {
		base, err := b.hostIDBase(netip.MustParsePrefix(a))
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if seen[base] || base < idBase || uint64(base)+idCount > 1<<31 {
			t.Errorf("%s: base %d reused or out of range", a, base)
		}
		seen[base] = true
	}
	if _, err := b.hostIDBase(netip.MustParsePrefix("10.215.0.2/30")); err == nil {
		t.Error("an address outside the pool got a range")
	}
}

// TestSpecHardening checks the OCI spec a sandbox gets: what the backend
// promises about its isolation is there, whatever the tests inside a
// sandbox can observe.
func TestSpecHardening(t *testing.T) {
	s := buildSpec(specInput{
		Spec:       &backend.Spec{ID: "x", Agent: backend.Agent{Path: "/a"}},
		RootPath:   "/root",
		Limits:     limits{CPUs: 1, MemoryBytes: 1 << 30, Pids: 512, DiskBytes: 1 << 30},
		NetNSPath:  "/run/netns/x",
		HostIDBase: idBase + 3*idCount,
	})
	if !s.Process.NoNewPrivileges {
		t.Error("no_new_privs is off")
	}
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_SYS_MODULE", "CAP_NET_ADMIN", "CAP_SYS_RESOURCE"} {
		if slices.Contains(s.Process.Capabilities.Bounding, c) {
			t.Errorf("bounding set holds %s", c)
		}
	}
	var types []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		types = append(types, ns.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.UserNamespace, specs.PIDNamespace, specs.MountNamespace, specs.NetworkNamespace, specs.CgroupNamespace, specs.IPCNamespace, specs.UTSNamespace} {
		if !slices.Contains(types, want) {
			t.Errorf("no %s namespace", want)
		}
	}
	if m := s.Linux.UIDMappings; len(m) != 1 || m[0].ContainerID != 0 || m[0].HostID != idBase+3*idCount || m[0].Size != idCount {
		t.Errorf("uid mapping %+v", m)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("/proc/sys is writable")
	}
	if *s.Linux.Resources.Pids.Limit != 512 || *s.Linux.Resources.Memory.Limit != 1<<30 {
		t.Errorf("limits %+v", s.Linux.Resources)
	}
	for _, r := range s.Process.Rlimits {
		if r.Type == "RLIMIT_NPROC" && r.Hard >= 512 {
			t.Errorf("RLIMIT_NPROC %d leaves root no reserve under pids.max 512", r.Hard)
		}
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActAllow {
		t.Fatalf("seccomp %+v", sc)
	}
	if runtime.GOARCH == "amd64" && !slices.Contains(sc.Architectures, specs.ArchX86) {
		t.Error("the 32-bit system call table is not filtered: int 0x80 would bypass the filter")
	}
	denied := map[string]bool{}
	for _, rule := range sc.Syscalls {
		if rule.Action == specs.ActErrno && len(rule.Args) == 0 {
			for _, n := range rule.Names {
				denied[n] = true
			}
		}
	}
	for _, n := range []string{"bpf", "keyctl", "io_uring_setup", "open_by_handle_at", "mount", "setns", "userfaultfd", "perf_event_open", "clone3", "socketcall"} {
		if !denied[n] {
			t.Errorf("%s is not refused", n)
		}
	}
	vsock := false
	for _, rule := range sc.Syscalls {
		if len(rule.Names) == 1 && rule.Names[0] == "socket" && len(rule.Args) == 1 && rule.Args[0].Value == unix.AF_VSOCK {
			vsock = rule.Action == specs.ActErrno
		}
	}
	if !vsock {
		t.Error("vsock sockets are not refused: they cross network namespaces")
	}
	if s.Linux.Sysctl["kernel.shmmax"] != strconv.Itoa(256<<20) {
		t.Errorf("kernel.shmmax %q, want a quarter of the memory limit", s.Linux.Sysctl["kernel.shmmax"])
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/sys/class/net") {
		t.Error("the host's interfaces (other sandboxes' ids in their aliases) are not masked")
	}
}
