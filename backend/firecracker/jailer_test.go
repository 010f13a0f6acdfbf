package firecracker

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

func TestJailerArgs(t *testing.T) {
	tests := []struct {
		name    string
		version int
		want    []string
	}{
		{name: "cgroup v2", version: 2, want: []string{
			"/usr/local/bin/jailer",
			"--id", "sb1",
			"--exec-file", "/usr/local/bin/firecracker",
			"--uid", "900007", "--gid", "900007",
			"--chroot-base-dir", "/var/lib/tupper/backends/firecracker/jail",
			"--cgroup-version", "2",
			"--parent-cgroup", "tupper-firecracker",
			"--cgroup", "cpu.max=150000 100000",
			"--cgroup", "memory.max=603979776",
			"--", "--api-sock", "/api.sock",
		}},
		{name: "cgroup v1", version: 1, want: []string{
			"/usr/local/bin/jailer",
			"--id", "sb1",
			"--exec-file", "/usr/local/bin/firecracker",
			"--uid", "900007", "--gid", "900007",
			"--chroot-base-dir", "/var/lib/tupper/backends/firecracker/jail",
			"--cgroup-version", "1",
			"--parent-cgroup", "tupper-firecracker",
			"--cgroup", "cpu.cfs_period_us=100000",
			"--cgroup", "cpu.cfs_quota_us=150000",
			"--cgroup", "memory.limit_in_bytes=603979776",
			"--", "--api-sock", "/api.sock",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jailerArgs(jailerSpec{
				Jailer: "/usr/local/bin/jailer", Firecracker: "/usr/local/bin/firecracker", ID: "sb1",
				UID: 900007, GID: 900007, ChrootBase: "/var/lib/tupper/backends/firecracker/jail",
				CgroupVersion: tt.version, CgroupParent: "tupper-firecracker",
				// 1.5 cores and 512 MiB of guest memory.
				Limits: vmmLimits(tt.version, 1.5, 512<<20),
			})
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("jailer argv (-want +got):\n%s", d)
			}
		})
	}
}

func TestFirecrackerArgs(t *testing.T) {
	want := []string{"/opt/fc/firecracker-v1.16.1-x86_64", "--api-sock", "api.sock", "--id", "sb1"}
	if d := cmp.Diff(want, firecrackerArgs("/opt/fc/firecracker-v1.16.1-x86_64", "sb1")); d != "" {
		t.Errorf("firecracker argv (-want +got):\n%s", d)
	}
}

func TestPaths(t *testing.T) {
	if got, want := chrootRoot("/st/jail", "/opt/fc/firecracker-v1.16.1-x86_64", "sb1"), "/st/jail/firecracker-v1.16.1-x86_64/sb1/root"; got != want {
		t.Errorf("chrootRoot = %q, want %q (the jailer names it after the binary)", got, want)
	}
	if got := cgroupRel("tupper-firecracker", "sb1"); got != "/tupper-firecracker/sb1" {
		t.Errorf("cgroupRel = %q", got)
	}
}

func TestVMSizes(t *testing.T) {
	for _, tt := range []struct {
		cpus  float64
		vcpus int
	}{{0.01, 1}, {0.5, 1}, {1, 1}, {1.2, 2}, {4, 4}, {32, 32}} {
		if got := vcpus(tt.cpus); got != tt.vcpus {
			t.Errorf("vcpus(%v) = %d, want %d", tt.cpus, got, tt.vcpus)
		}
	}
	if got := memMiB(256<<20 + 1); got != 257 {
		t.Errorf("memMiB rounds %d down to %d", 256<<20+1, got)
	}
	if l := vmmLimits(2, 0.001, 128<<20); l[0].Value != "1000 100000" {
		t.Errorf("the smallest quota: %v", l)
	}
}

func TestAgentArgs(t *testing.T) {
	got := agentArgs(&backend.Spec{Agent: backend.Agent{Args: []string{"--addr", ":49983"}}})
	want := []string{"--addr", ":49983", "--vsock-port", "49983", "--vsock-forward-port", "49984"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("agent args (-want +got):\n%s", d)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{name: "minimal", cfg: Config{Root: "/st"}},
		{name: "no root", cfg: Config{}, want: "Root is required"},
		{name: "relative root", cfg: Config{Root: "st"}, want: "must be absolute"},
		{name: "relative kernel", cfg: Config{Root: "/st", KernelDir: "k"}, want: "KernelDir"},
		{name: "binary name without firecracker", cfg: Config{Root: "/st", FirecrackerPath: "/opt/fc"}, want: "holds \"firecracker\""},
		{name: "any name without the jailer", cfg: Config{Root: "/st", FirecrackerPath: "/opt/fc", NoJailer: true}},
		{name: "bad cgroup", cfg: Config{Root: "/st", CgroupParent: "../x"}, want: "CgroupParent"},
		{name: "small memory", cfg: Config{Root: "/st", DefaultMemoryBytes: 1 << 20}, want: "below 128 MiB"},
		{name: "negative", cfg: Config{Root: "/st", DefaultPids: -1}, want: "negative"},
		{name: "uid base in the system range", cfg: Config{Root: "/st", JailerUIDBase: 100}, want: "above 1000"},
		{name: "boot args on two lines", cfg: Config{Root: "/st", BootArgs: "a\nb"}, want: "one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate = %v, want an invalid argument saying %q", err, tt.want)
			}
		})
	}
}

func TestConfigFromOptions(t *testing.T) {
	cfg, err := configFrom(backend.Config{Root: "/st", Options: map[string]string{
		"firecracker": "/opt/firecracker", "jailer": "/opt/jailer", "kernel": "/opt/kernel", "no-jailer": "true", "boot-args": "loglevel=7",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Root: "/st", FirecrackerPath: "/opt/firecracker", JailerPath: "/opt/jailer", KernelDir: "/opt/kernel", NoJailer: true, BootArgs: "loglevel=7"}
	if d := cmp.Diff(want, cfg, cmp.AllowUnexported(Config{})); d != "" {
		t.Errorf("config (-want +got):\n%s", d)
	}
	for _, opts := range []map[string]string{{"kernal": "/k"}, {"no-jailer": "maybe"}, {"kernel": "relative"}} {
		if _, err := configFrom(backend.Config{Root: "/st", Options: opts}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("options %v: err = %v, want invalid argument", opts, err)
		}
	}
}
