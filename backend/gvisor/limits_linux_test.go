package gvisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
)

// hostCgroupValue reads file from the host cgroup of sandbox id, in
// whichever hierarchy has it.
func hostCgroupValue(t *testing.T, b *Backend, id string, files ...string) string {
	t.Helper()
	dirs, err := oci.CgroupDirs(cgroupsPath(b.cfg.CgroupParent, id))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		for _, f := range files {
			if data, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				return strings.TrimSpace(string(data))
			}
		}
	}
	t.Fatalf("no %v in the cgroups of %s (%v)", files, id, dirs)
	return ""
}

// The sandbox sees its own limits; the host's sit above them.
func TestLimitsInsideAndOnTheHost(t *testing.T) {
	b := newTestBackend(t)
	id := newID("lim")
	spec := testSpec(id)
	spec.Resources.MemoryBytes = 256 << 20
	spec.Resources.Pids = 64
	sb := startSandbox(t, b, spec)
	lim := resolveLimits(&b.cfg, spec.Resources)

	tests := []struct {
		name, cmd, want string
	}{
		// What programs size themselves by: the sandbox's limit, not the
		// host cgroup's, which is higher.
		{"MemTotal", "grep MemTotal /proc/meminfo", "MemTotal:         262144 kB"},
		{"cgroup memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes", strconv.Itoa(256 << 20)},
		{"open files, soft", "ulimit -n", "1024"},
		{"open files, hard", "ulimit -Hn", "65536"},
		{"processes per user", "ulimit -u", "64"},
		// The real agent writes the Pids limit here for the whole sandbox
		// (local/ tests it); the test agent leaves it.
		{"own pids cgroup", "cat /sys/fs/cgroup/pids/pids.max", "max"},
		{"/dev/shm holds half the limit", "df -k /dev/shm | tail -1 | awk '{print $2}'", "131072"},
		// The hard limit holds: a process may raise its soft limit to it,
		// not past it.
		{"raise to hard", "ulimit -n 65536 && ulimit -n", "65536"},
		{"past hard", "ulimit -n 65537 2>/dev/null && echo raised || echo refused", "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.TrimSpace(mustRun(t, sb.AgentAddr, tt.cmd)); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.cmd, got, tt.want)
			}
		})
	}

	t.Run("host cgroup", func(t *testing.T) {
		if got := hostCgroupValue(t, b, id, "memory.limit_in_bytes", "memory.max"); got != strconv.FormatInt(lim.hostMemory(), 10) {
			t.Errorf("host memory limit = %s, want %d (%d MiB of headroom)", got, lim.hostMemory(), (lim.hostMemory()-lim.MemoryBytes)>>20)
		}
		if got := hostCgroupValue(t, b, id, "pids.max"); got != strconv.FormatInt(lim.hostPids(), 10) {
			t.Errorf("host pids.max = %s, want %d", got, lim.hostPids())
		}
		root, err := controllerHierarchy("pids")
		if err != nil {
			t.Fatal(err)
		}
		parent, err := readPids(filepath.Join(root, b.cfg.CgroupParent), "pids.max")
		if err != nil || parent != b.budget.tasks {
			t.Errorf("parent pids.max = %d, %v; want the host's budget %d", parent, err, b.budget.tasks)
		}
		if root, err = controllerHierarchy("memory"); err != nil {
			t.Fatal(err)
		}
		if got := memoryLimit(filepath.Join(root, b.cfg.CgroupParent)); got != b.budget.memory {
			t.Errorf("parent memory limit = %d, want the host's budget %d", got, b.budget.memory)
		}
	})
}

// testCgroupParent returns a cgroup parent of the test's own, removed
// (with whatever a failed test left in it) when the test ends.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	r := make([]byte, 4)
	rand.Read(r)
	parent := "tupper-test-" + hex.EncodeToString(r)
	t.Cleanup(func() {
		if err := oci.RemoveCgroup("/" + parent); err != nil {
			t.Errorf("remove test cgroup parent: %v", err)
		}
	})
	return parent
}

// Admission counts what sandboxes use, not their limits: with room for
// one sandbox's burst and little more, idle sandboxes are admitted, one
// holding many host tasks keeps the next out with an error naming the
// budget, and room comes back when it stops. A refused start leaves
// nothing.
func TestHostBudgetCountsUse(t *testing.T) {
	parent := testCgroupParent(t)
	const pids = 256
	per := limits{Pids: pids}.hostPids()
	b := newTestBackend(t, func(c *Config) {
		c.CgroupParent = parent
		// One sandbox's burst, three starts, and 200 tasks to spare.
		c.HostPids = per + 3*startTasks + 200
	})
	ctx := context.Background()
	spec := func(name string) *backend.Spec { return pidsSpec(name, pids) }
	first := startSandbox(t, b, spec("b1"))
	startSandbox(t, b, spec("b2"))

	// 150 sleeping processes hold about 300 host tasks (a stub process and
	// thread each): past the 200 to spare with the next start.
	mustRun(t, first.AgentAddr, `for i in $(seq 150); do setsid sleep 600 </dev/null >/dev/null 2>&1 & done; echo started`)
	third := spec("b3")
	_, err := b.Start(ctx, third)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("Start beside a busy sandbox = %v, want ErrResourceExhausted", err)
	}
	for _, want := range []string{"host process budget", "kernel.pid_max", "tupper serve --pids", "HostPids"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	assertNothingLeft(t, b, third.ID)
	// Reservations last only until runsc has made the cgroup.
	if left, _ := filepath.Glob(filepath.Join(b.budget.dir, "*"+parent+"*")); len(left) != 0 {
		t.Errorf("reservations left: %v", left)
	}

	// gVisor keeps the host tasks of ended processes (the stubs wait in
	// a pool for the next): room comes back when the busy sandbox stops.
	if err := b.Stop(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	startSandbox(t, b, third)
}

// The sandboxes' limits may add up to Overcommit times the host's budget
// and no more.
func TestHostBudgetOvercommit(t *testing.T) {
	parent := testCgroupParent(t)
	const pids = 64
	per := limits{Pids: pids}.hostPids()
	b := newTestBackend(t, func(c *Config) {
		c.CgroupParent = parent
		c.HostPids = 4 * per
		c.Overcommit = 1.5 // the limits of six sandboxes fit, not of seven
	})
	spec := func(name string) *backend.Spec { return pidsSpec(name, pids) }
	for i := range 6 {
		startSandbox(t, b, spec(fmt.Sprintf("o%d", i)))
	}
	seventh := spec("o7")
	_, err := b.Start(context.Background(), seventh)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "--overcommit") {
		t.Fatalf("seventh Start = %v, want ErrResourceExhausted naming --overcommit", err)
	}
	assertNothingLeft(t, b, seventh.ID)
}

// A fork bomb in a sandbox gets EAGAIN at the sandbox's limit, the
// sandbox answers after it, and the host tasks it holds stay under its
// host limit.
func TestForkBombHostTasks(t *testing.T) {
	b := newTestBackend(t)
	id := newID("bomb")
	spec := testSpec(id)
	spec.Resources.Pids = 128
	sb := startSandbox(t, b, spec)
	lim := resolveLimits(&b.cfg, spec.Resources)

	// The classic bomb, run for a few seconds in its own session, then
	// killed whole; busybox's sh reports its failed forks.
	r := run(t, sb.AgentAddr, `setsid sh -c 'bomb() { bomb | bomb & }; bomb' >/tmp/bomb.log 2>&1 &
sleep 8; n=$(ls -d /proc/[0-9]* | wc -l); kill -9 -1 2>/dev/null; sleep 1; echo running $n; grep -c -i "fork" /tmp/bomb.log`)
	t.Logf("bomb: %q", r.Output)
	if !strings.Contains(r.Output, "running") {
		t.Fatalf("no report: %q", r.Output)
	}
	peak := hostCgroupValue(t, b, id, "pids.peak", "pids.current")
	t.Logf("host tasks of the sandbox: %s at the peak (limit %d)", peak, lim.hostPids())
	if n, err := strconv.ParseInt(peak, 10, 64); err != nil || n > lim.hostPids() {
		t.Errorf("host tasks peaked at %s, above the sandbox's host limit %d", peak, lim.hostPids())
	}
	if !healthy(sb.AgentAddr, 5*time.Second) {
		t.Fatal("sandbox stopped answering after the fork bomb")
	}
	if got := mustRun(t, sb.AgentAddr, "echo alive"); got != "alive\n" {
		t.Errorf("after the bomb: %q", got)
	}
	if ev := hostCgroupValue(t, b, id, "pids.events"); !strings.HasSuffix(ev, " 0") {
		t.Errorf("the host limit was hit (%s): the backstop, not the sandbox's own limit, stopped the bomb", ev)
	}
}

// All sandboxes together past their parent's memory limit: the kernel
// ends sandboxes (their sentries are the largest processes under the
// parent), not everything else; the parent never uses more than its limit,
// so the host keeps its reserve, and a new sandbox starts afterwards.
func TestHostBudgetHoldsTheReserve(t *testing.T) {
	parent := testCgroupParent(t)
	b := newTestBackend(t, func(c *Config) {
		c.CgroupParent = parent
		c.HostMemory = 1792 << 20
	})
	var sbs []*backend.Sandbox
	for i := range 4 {
		sbs = append(sbs, startSandbox(t, b, pidsSpec(fmt.Sprintf("r%d", i), 64)))
	}
	// 480 MiB of shared memory each (/dev/shm holds half of the 1 GiB
	// limit): within each sandbox's own limit, together past 1.75 GiB.
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = tryRun(sb.AgentAddr, "dd if=/dev/zero of=/dev/shm/fill bs=4M count=120 2>&1 | tail -1")
		}()
	}
	wg.Wait()
	alive := 0
	for _, sb := range sbs {
		if healthy(sb.AgentAddr, 5*time.Second) {
			alive++
		}
	}
	root, err := controllerHierarchy("memory")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, parent)
	peak, err := readPids(dir, "memory.max_usage_in_bytes")
	if err != nil {
		peak, err = readPids(dir, "memory.peak")
	}
	t.Logf("%d of %d sandboxes alive; the parent peaked at %d MiB of its %d MiB", alive, len(sbs), peak>>20, b.budget.memory>>20)
	// The kernel's figure may pass the limit by the pages of one charge.
	if err != nil || peak > b.budget.memory+1<<20 {
		t.Errorf("the parent used %d bytes (%v), above its limit %d", peak, err, b.budget.memory)
	}
	if alive == len(sbs) {
		t.Errorf("every sandbox lives: together they did not reach the parent's limit, the test proves nothing")
	}
	for _, sb := range sbs {
		if err := b.Stop(context.Background(), sb.ID); err != nil {
			t.Errorf("stop %s: %v", sb.ID, err)
		}
	}
	after := startSandbox(t, b, testSpec(newID("after")))
	if got := mustRun(t, after.AgentAddr, "echo alive"); got != "alive\n" {
		t.Errorf("a sandbox started afterwards: %q", got)
	}
}

// pidsSpec is testSpec for a new id named name, holding pids tasks.
func pidsSpec(name string, pids int64) *backend.Spec {
	s := testSpec(newID(name))
	s.Resources.Pids = pids
	return s
}
