package firecracker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestCgroupUsage reads the usage files of cgroup v1 and v2 as the kernel
// writes them.
func TestCgroupUsage(t *testing.T) {
	write := func(dir string, files map[string]string) {
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("v2", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, map[string]string{
			"cpu.stat":       "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 10\nnr_throttled 2\nthrottled_usec 5000\n",
			"memory.current": "300000000\n",
			"memory.stat":    "anon 250000000\nfile 50000000\nactive_file 30000000\ninactive_file 20000000\n",
		})
		u, err := readCgroupUsage(2, dir, dir)
		if err != nil || u.cpuNanos != 1234567000 || u.memBytes != 280000000 {
			t.Errorf("v2 = %+v, %v; want 1234567000 ns, 280000000 bytes", u, err)
		}
	})
	t.Run("v1", func(t *testing.T) {
		cpu, mem := t.TempDir(), t.TempDir()
		write(cpu, map[string]string{"cpuacct.usage": "987654321\n"})
		write(mem, map[string]string{
			"memory.usage_in_bytes": "400000000\n",
			"memory.stat":           "cache 60000000\nrss 300000000\ninactive_file 1000\ntotal_cache 60000000\ntotal_rss 300000000\ntotal_inactive_file 40000000\n",
		})
		u, err := readCgroupUsage(1, cpu, mem)
		if err != nil || u.cpuNanos != 987654321 || u.memBytes != 360000000 {
			t.Errorf("v1 = %+v, %v; want 987654321 ns, 360000000 bytes", u, err)
		}
	})
	t.Run("cache above usage", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, map[string]string{"cpu.stat": "usage_usec 1\n", "memory.current": "100\n", "memory.stat": "inactive_file 200\n"})
		if u, err := readCgroupUsage(2, dir, dir); err != nil || u.memBytes != 100 {
			t.Errorf("= %+v, %v; want the usage as it is", u, err)
		}
	})
	for name, files := range map[string]map[string]string{
		"no cpu.stat usage": {"cpu.stat": "nr_periods 1\n", "memory.current": "1\n", "memory.stat": ""},
		"garbage":           {"cpu.stat": "usage_usec many\n", "memory.current": "1\n", "memory.stat": ""},
		"no memory.current": {"cpu.stat": "usage_usec 1\n", "memory.stat": ""},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(dir, files)
			if u, err := readCgroupUsage(2, dir, dir); err == nil {
				t.Errorf("= %+v, want an error", u)
			}
		})
	}
}

// vmmCgroupOf returns the cgroup of process pid in the hierarchy that has
// controller, from /proc/<pid>/cgroup.
func vmmCgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (controller == "" && f[0] == "0" || controller != "" && strings.Contains(","+f[1]+",", ","+controller+",")) {
			return f[2]
		}
	}
	return ""
}

// checkStats checks Stats of running sandbox id of b, whose microVM has
// memMiB: the VMM's cgroup, its CPU time growing as the VMM works.
func checkStats(t *testing.T, b *Backend, id string, memMiB int64) {
	t.Helper()
	rec, err := b.readRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	// The VMM counts in cgroup <parent>/<id>: the cpuacct hierarchy's
	// too, where it is one of its own, as on this kind of host.
	want := cgroupRel(b.cfg.CgroupParent, id)
	if b.cgroups.Version == 1 {
		for _, c := range []string{"cpu", "cpuacct", "memory"} {
			if got := vmmCgroupOf(t, rec.Pid, c); got != want {
				t.Errorf("the VMM's %s cgroup is %q, want %q", c, got, want)
			}
		}
	} else if got := vmmCgroupOf(t, rec.Pid, ""); got != want {
		t.Errorf("the VMM's cgroup is %q, want %q", got, want)
	}
	st, err := b.Stats(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryLimitBytes != uint64(memMiB)<<20 || st.MemoryUsageBytes == 0 || st.CPUUsageNanos == 0 || st.Pids != 0 {
		t.Errorf("Stats = %+v; want the VM's %d MiB as the limit, some memory and CPU time, no pids", st, memMiB)
	}
	// The VMM relays some MiB of the guest's output: work of its own.
	if out := guestRun(t, b, id, "head -c 4194304 /dev/zero | base64 -w0"); len(out) != 5592408 {
		t.Fatalf("the guest's output: %d bytes", len(out))
	}
	after, err := b.Stats(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the VMM's use: %+v before its work, %+v after", *st, *after)
	if after.CPUUsageNanos <= st.CPUUsageNanos {
		t.Errorf("CPU time %d after the VMM's work, %d before", after.CPUUsageNanos, st.CPUUsageNanos)
	}
}

// TestStats reads a sandbox's use from its VMM's cgroup, running and
// paused, and refuses it once the VMM is gone. The stand-in's guest is a
// runc sandbox with a cgroup of its own, so the VMM's cgroup counts the
// stand-in's own work (its API, the vsock relay) where a real microVM's
// would count the guest's: the test checks the backend reads the VMM's
// cgroup, and that its count grows as the VMM works.
func TestStats(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots a stand-in guest")
	}
	b := newStandInBackend(t)
	const id = "stats1"
	if _, err := b.Start(startCtx(t), testSpec(t, id)); err != nil {
		t.Fatal(err)
	}
	waitAgent(t, b, id)
	checkStats(t, b, id, 256)
	if err := b.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Stats(t.Context(), id); err != nil || st.MemoryLimitBytes != 256<<20 {
		t.Errorf("Stats of a paused sandbox = %+v, %v", st, err)
	}
	b.crashVMM(t, id)
	testutil.WaitFor(t, 30*time.Second, "the VMM to be gone", func() bool {
		st, _ := b.State(t.Context(), id)
		return st == backend.StateStopped
	})
	if _, err := b.Stats(t.Context(), id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Stats after the VMM's end = %v, want a failed precondition", err)
	}
	if err := b.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stats(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stats after Stop = %v, want not found", err)
	}
	noLeftovers(t, b, id)
}
