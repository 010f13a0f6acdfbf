package gvisor

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "minimal", cfg: Config{Root: "/var/lib/tupper/gvisor"}, ok: true},
		{name: "full", cfg: Config{
			Root: "/r", RunscPath: "/usr/bin/runsc", Platform: "ptrace", CgroupParent: "a/b",
			DefaultDiskBytes: 10 << 30, SharedRoot: "/run/x", DefaultCPUs: 2, DefaultMemoryBytes: 1 << 30, DefaultPids: 10,
			Network: network.Config{Subnet: netip.MustParsePrefix("10.50.0.0/16")},
		}, ok: true},
		{name: "no root", cfg: Config{}},
		{name: "relative root", cfg: Config{Root: "state"}},
		{name: "unknown platform", cfg: Config{Root: "/r", Platform: "qemu"}},
		{name: "relative runsc", cfg: Config{Root: "/r", RunscPath: "runsc"}},
		{name: "absolute cgroup parent", cfg: Config{Root: "/r", CgroupParent: "/tupper"}},
		{name: "cgroup parent escapes", cfg: Config{Root: "/r", CgroupParent: "a/../../b"}},
		{name: "negative disk", cfg: Config{Root: "/r", DefaultDiskBytes: -1}},
		{name: "negative default", cfg: Config{Root: "/r", DefaultPids: -1}},
		{name: "bad network", cfg: Config{Root: "/r", Network: network.Config{Subnet: netip.MustParsePrefix("10.0.0.0/31")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate() = %v, not ErrInvalidArgument", err)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Root: "/r"}.withDefaults()
	if c.Platform != "systrap" || c.CgroupParent != "tupper" || c.DefaultCPUs != 1 ||
		c.DefaultMemoryBytes != 1<<30 || c.DefaultPids != 1024 || c.SharedRoot != DefaultSharedRoot ||
		c.Network.Dir != "/r/net" || c.Logger == nil || c.Network.Logger == nil {
		t.Errorf("withDefaults() = %+v", c)
	}
}

func TestFindRunsc(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "runsc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(RunscEnv, fake)
	if got, err := FindRunsc(); err != nil || got != fake {
		t.Errorf("FindRunsc() with $%s = %q, %v; want %q", RunscEnv, got, err, fake)
	}
	t.Setenv(RunscEnv, filepath.Join(dir, "missing"))
	if _, err := FindRunsc(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("FindRunsc() with a missing $%s = %v, want ErrUnavailable", RunscEnv, err)
	}
}

func TestConfigFrom(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]string
		net  backend.NetworkConfig
		want Config
		ok   bool
	}{
		{name: "none", ok: true, want: Config{Root: "/r", Egress: &network.EgressConfig{}}},
		{name: "all", ok: true,
			opts: map[string]string{"runsc": "/opt/runsc", "platform": "ptrace", "debug": "true"},
			want: Config{Root: "/r", RunscPath: "/opt/runsc", Platform: "ptrace", Debug: true, Egress: &network.EgressConfig{}}},
		{name: "no egress", ok: true, net: backend.NetworkConfig{NoEgress: true}, want: Config{Root: "/r"}},
		{name: "egress settings", ok: true,
			net:  backend.NetworkConfig{DNSUpstreams: []string{"198.51.100.53:53"}, Exempt: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}},
			want: Config{Root: "/r", Egress: &network.EgressConfig{DNSUpstreams: []string{"198.51.100.53:53"}, Exempt: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}}},
		{name: "bad upstream CA", net: backend.NetworkConfig{UpstreamCAs: []byte("not PEM")}},
		{name: "unknown", opts: map[string]string{"plaform": "ptrace"}},
		{name: "bad bool", opts: map[string]string{"debug": "sometimes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := configFrom(backend.Config{Root: "/r", Options: tt.opts, Network: tt.net})
			if (err == nil) != tt.ok {
				t.Fatalf("configFrom = %v, want ok=%v", err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("configFrom = %v, not ErrInvalidArgument", err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
				t.Errorf("configFrom (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegistered(t *testing.T) {
	for _, n := range backend.Names() {
		if n == "gvisor" {
			return
		}
	}
	t.Errorf("gvisor is not among the registered backends %v", backend.Names())
}

func TestBuildSpec(t *testing.T) {
	cfg := Config{Root: "/r"}.withDefaults()
	spec := &backend.Spec{
		ID:     "sb-1",
		RootFS: "/images/base",
		Env:    []string{"LANG=C.UTF-8"},
		Agent:  backend.Agent{Path: "/opt/tupper-agent", Args: []string{"--addr", ":49983"}},
		Resources: backend.Resources{
			CPUs:        0.5,
			MemoryBytes: 512 << 20,
		},
	}
	got := buildSpec(specInput{
		Spec:        spec,
		RootPath:    "/r/sandboxes/sb-1/rootfs",
		Limits:      resolveLimits(&cfg, spec.Resources),
		NetNSPath:   "/r/net/netns/sb-1",
		CgroupsPath: cgroupsPath(cfg.CgroupParent, spec.ID),
	})

	if diff := cmp.Diff([]string{"/.tupper/tupper-agent", "--addr", ":49983"}, got.Process.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"LANG=C.UTF-8", defaultPath}, got.Process.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if got.Process.User.UID != 0 || got.Process.Cwd != "/" || got.Process.Terminal {
		t.Errorf("process = %+v", got.Process)
	}
	wantRlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_NPROC", Hard: 1024, Soft: 1024},
		{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 1024},
	}
	if diff := cmp.Diff(wantRlimits, got.Process.Rlimits); diff != "" {
		t.Errorf("rlimits (-want +got):\n%s", diff)
	}
	for _, c := range got.Process.Capabilities.Bounding {
		if c == "CAP_SYS_ADMIN" || c == "CAP_SYS_RESOURCE" || c == "CAP_NET_RAW" {
			t.Errorf("capability %s granted", c)
		}
	}
	if got.Root.Path != "/r/sandboxes/sb-1/rootfs" || got.Root.Readonly {
		t.Errorf("root = %+v, want the writable overlay", got.Root)
	}
	if got.Hostname != "sb-1" {
		t.Errorf("hostname = %q, want the id", got.Hostname)
	}
	mounts := map[string]specs.Mount{}
	for _, m := range got.Mounts {
		mounts[m.Destination] = m
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/sys", "/sys/fs/cgroup", AgentPath} {
		if _, ok := mounts[d]; !ok {
			t.Errorf("no mount at %s", d)
		}
	}
	if m := mounts[AgentPath]; m.Source != "/opt/tupper-agent" || !contains(m.Options, "ro") {
		t.Errorf("agent mount = %+v, want a read-only bind of the agent", m)
	}
	if m := mounts["/sys"]; !contains(m.Options, "ro") {
		t.Errorf("/sys mount = %+v, want read-only", m)
	}
	// Shared memory is not freed by killing processes: half the limit.
	if m := mounts["/dev/shm"]; !contains(m.Options, "size=262144k") {
		t.Errorf("/dev/shm mount = %+v, want size=262144k, half the memory limit", m)
	}
	// /tmp is the root's, in the capped layer (see tmpPlaceholder).
	if m, ok := mounts["/tmp"]; ok {
		t.Errorf("/tmp mount = %+v, want none", m)
	}

	l := got.Linux
	if l.CgroupsPath != "/tupper/sb-1" {
		t.Errorf("cgroupsPath = %q", l.CgroupsPath)
	}
	// The spec carries the sandbox's own limit, which runsc shows inside;
	// the host's goes on the cgroup after runsc create.
	if *l.Resources.Memory.Limit != 512<<20 || l.Resources.Memory.Swap != nil {
		t.Errorf("memory = %+v", l.Resources.Memory)
	}
	if *l.Resources.CPU.Quota != 50_000 || *l.Resources.CPU.Period != 100_000 {
		t.Errorf("cpu = %+v", l.Resources.CPU)
	}
	if *l.Resources.Pids.Limit != 1024*hostTasksPerTask+hostTasksBase {
		t.Errorf("host pids limit = %d", *l.Resources.Pids.Limit)
	}
	var netns string
	for _, ns := range l.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			netns = ns.Path
		}
	}
	if netns != "/r/net/netns/sb-1" {
		t.Errorf("network namespace = %q", netns)
	}
}

func TestHostLimitFigures(t *testing.T) {
	tests := []struct {
		name              string
		l                 limits
		wantPids, wantMiB int64
	}{
		// pids: 5 host tasks per task and 512; memory: the limit, 64 MiB,
		// an eighth of the limit and 96 KiB per host task.
		{"default", limits{MemoryBytes: 1 << 30, Pids: 1024}, 5632, 1024 + 64 + 128 + 528},
		{"small", limits{MemoryBytes: 256 << 20, Pids: 64}, 832, 256 + 64 + 32 + 78},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.hostPids(); got != tt.wantPids {
				t.Errorf("hostPids = %d, want %d", got, tt.wantPids)
			}
			if got := tt.l.hostMemory(); got != tt.wantMiB<<20 {
				t.Errorf("hostMemory = %d MiB, want %d", got>>20, tt.wantMiB)
			}
		})
	}
}

func TestBuildSpecKeepsPathAndHostname(t *testing.T) {
	cfg := Config{Root: "/r"}.withDefaults()
	spec := &backend.Spec{ID: "x", Hostname: "box", Env: []string{"PATH=/only"}}
	got := buildSpec(specInput{Spec: spec, Limits: resolveLimits(&cfg, spec.Resources), LimitSwap: true})
	if diff := cmp.Diff([]string{"PATH=/only"}, got.Process.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if got.Hostname != "box" {
		t.Errorf("hostname = %q", got.Hostname)
	}
	if m := got.Linux.Resources.Memory; m.Swap == nil || *m.Swap != *m.Limit {
		t.Errorf("memory = %+v, want swap equal to the limit", m)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
