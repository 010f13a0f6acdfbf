package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/bench"
	"github.com/lightbearco/tupper/sdk"
)

// densityCreate creates n idle sandboxes through the daemon d in waves of
// wave concurrent creates, while a client lists the sandboxes every 200 ms.
// It returns the sandboxes and the list latencies seen during the creates;
// a create that does not answer 201 and a list that fails fail the test.
func densityCreate(ctx context.Context, t testing.TB, d *serveDaemon, client *sdk.Client, n, wave int) (sbs []*sdk.Sandbox, lists []time.Duration) {
	stopList := make(chan struct{})
	listed := make(chan []time.Duration, 1)
	go func() {
		var took []time.Duration
		defer func() { listed <- took }()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopList:
				return
			case <-tick.C:
			}
			start := time.Now()
			status, body, err := d.api(ctx, http.MethodGet, "/sandboxes", nil)
			if err != nil || status != http.StatusOK {
				t.Errorf("list during the creates: %d %s %v", status, body, err)
				continue
			}
			took = append(took, time.Since(start))
		}
	}()
	var mu sync.Mutex
	for done := 0; done < n; done += wave {
		var wg sync.WaitGroup
		for range min(wave, n-done) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb, err := client.Create(ctx, sdk.CreateOptions{Timeout: 30 * time.Minute})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("create %d of %d: %v", len(sbs)+1, n, err)
					return
				}
				sbs = append(sbs, sb)
			}()
		}
		wg.Wait()
		if t.Failed() {
			break
		}
	}
	close(stopList)
	return sbs, <-listed
}

// densityCheck runs a command in every sandbox of sbs and kills them all;
// a sandbox that does not answer, or a kill that fails, fails the test.
func densityCheck(ctx context.Context, t testing.TB, sbs []*sdk.Sandbox) {
	for i, sb := range sbs {
		r, err := sb.Commands.Run(ctx, "echo alive "+strconv.Itoa(i))
		if err != nil || r.Stdout != fmt.Sprintf("alive %d\n", i) {
			t.Errorf("sandbox %d (%s) with all running: %+v %v", i, sb.ID(), r, err)
		}
	}
	for _, sb := range sbs {
		if err := sb.Kill(ctx); err != nil {
			t.Errorf("kill %s: %v", sb.ID(), err)
		}
	}
}

// percentile returns the p-th percentile of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// TestDensity creates 100 idle base sandboxes through `tupper serve` with
// its default limits and admission, in waves of 10: every create is
// admitted (the host budget counts what sandboxes use, not their worst
// case, which admitted 25 here), every sandbox answers a command once all
// run, listing works throughout, and killing them all leaves nothing (the
// daemon's cleanup checks the host).
func TestDensity(t *testing.T) {
	if testing.Short() {
		t.Skip("boots 100 gVisor sandboxes")
	}
	d := startServeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sbs, lists := densityCreate(ctx, t, d, goClient(t, d), 100, 10)
	t.Logf("%d idle sandboxes running", len(sbs))
	// Should the host run out of memory, its kernel ends a sandbox before
	// the daemon and the host's services: the sandbox's runsc processes
	// (its sentry, its gofer) score 500, and the daemon lowers its own to
	// -900 where it holds CAP_SYS_RESOURCE (else it says so and keeps 0).
	want := -900
	if !hasCapSysResource(t) {
		want = 0
		if !strings.Contains(d.log(), "its oom_score_adj stays") {
			t.Error("a daemon that cannot lower its oom_score_adj does not say so")
		}
	}
	if got := oomScoreAdj(t, d.cmd.Process.Pid); got != want {
		t.Errorf("the daemon's oom_score_adj = %d, want %d", got, want)
	}
	if len(sbs) > 0 {
		runsc := 0
		for _, pid := range readCgroupProcs(t, "/sys/fs/cgroup/pids/tupper/"+sbs[0].ID()) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if !strings.HasPrefix(string(cmdline), "runsc") {
				continue // a stub the sentry forked before runsc set the score
			}
			runsc++
			if got := oomScoreAdj(t, pid); got != 500 {
				t.Errorf("runsc process %d of sandbox %s: oom_score_adj = %d, want 500", pid, sbs[0].ID(), got)
			}
		}
		if runsc == 0 {
			t.Errorf("no runsc process in sandbox %s's cgroup", sbs[0].ID())
		}
	}
	densityCheck(ctx, t, sbs)
	if len(lists) == 0 {
		t.Fatal("no list answered during the creates")
	}
	slices.Sort(lists)
	t.Logf("list during the creates: %d answers, median %v, p95 %v, max %v",
		len(lists), percentile(lists, 50), percentile(lists, 95), lists[len(lists)-1])
	if ids := d.sandboxIDs(ctx, t); len(ids) != 0 {
		t.Errorf("sandboxes left after the kills: %v", ids)
	}
}

// BenchmarkDensity starts TUPPER_DENSITY (default 300) idle base sandboxes
// through `tupper serve` with its defaults, in waves of 10, and reports
// with all of them running: host memory (PSS) and host tasks per sandbox,
// the list latency seen during the creates, and a command's round trip in
// one of them against the same before its neighbours came, in the same
// run.
//
//	go test -run '^$' -bench Density -benchtime 1x ./e2e/
func BenchmarkDensity(b *testing.B) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("TUPPER_DENSITY")); err == nil && v > 1 {
		n = v
	}
	d := startServeDaemon(b)
	ctx := context.Background()
	client := goClient(b, d)
	probe, err := client.Create(ctx, sdk.CreateOptions{Timeout: 30 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Kill(ctx)
	roundTrips := func() time.Duration {
		var took []time.Duration
		for range 21 {
			start := time.Now()
			if _, err := probe.Commands.Run(ctx, "true"); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return percentile(took, 50)
	}
	alone := roundTrips()
	aloneMiB := bench.SandboxMemory([]string{probe.ID()})[probe.ID()]
	b.ResetTimer()
	for range b.N {
		sbs, lists := densityCreate(ctx, b, d, client, n-1, 10)
		beside := roundTrips()
		ids := []string{probe.ID()}
		for _, sb := range sbs {
			ids = append(ids, sb.ID())
		}
		var pss []float64
		for _, mib := range bench.SandboxMemory(ids) {
			pss = append(pss, mib)
		}
		slices.Sort(pss)
		tasks := parentTasks(b)
		slices.Sort(lists)
		b.ReportMetric(float64(len(ids)), "sandboxes")
		b.ReportMetric(aloneMiB, "MiB-alone")
		if len(pss) > 0 {
			b.ReportMetric(pss[len(pss)/2], "MiB/sandbox-p50")
		}
		b.ReportMetric(float64(tasks)/float64(len(ids)), "tasks/sandbox")
		b.ReportMetric(float64(beside)/float64(alone), "roundtrip-ratio")
		b.ReportMetric(float64(alone.Microseconds())/1000, "roundtrip-alone-ms")
		b.ReportMetric(float64(percentile(lists, 50).Microseconds())/1000, "list-p50-ms")
		b.ReportMetric(float64(percentile(lists, 95).Microseconds())/1000, "list-p95-ms")
		b.StopTimer()
		densityCheck(ctx, b, sbs)
		b.StartTimer()
	}
}

// parentTasks reads the host tasks of every gVisor sandbox on this host:
// pids.current of their parent cgroup.
func parentTasks(t testing.TB) int64 {
	for _, f := range []string{"/sys/fs/cgroup/pids/tupper/pids.current", "/sys/fs/cgroup/tupper/pids.current"} {
		if b, err := os.ReadFile(f); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Log("no pids.current for the sandboxes' parent cgroup")
	return 0
}

// oomScoreAdj reads a process's oom_score_adj.
func oomScoreAdj(t testing.TB, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readCgroupProcs lists the processes of the cgroup at dir (v1's pids
// hierarchy or v2's unified one).
func readCgroupProcs(t testing.TB, dir string) []int {
	b, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		b, err = os.ReadFile(strings.Replace(dir, "/pids/", "/", 1) + "/cgroup.procs")
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// hasCapSysResource reports whether this process may lower an
// oom_score_adj: it holds CAP_SYS_RESOURCE, as the daemon it starts does.
func hasCapSysResource(t testing.TB) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<24) != 0
		}
	}
	return false
}
