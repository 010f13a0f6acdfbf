package local_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/bench"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// concurrentCreates is the size of the bursts below: the 50.
const concurrentCreates = 50

// BenchmarkConcurrentWarmCreates starts 50 creates at once against a full
// warm pool of 50 and reports their p50 and p95 (p95-ms ÷ the median of
// BenchmarkCreateToFirstCommandWarm's is the ratio), then the
// host memory of each of the 50 idle sandboxes (idle-MiB, the median PSS
// of its runsc processes). The sandboxes hold 256 tasks each, so that 50
// fit the host's task budget (see backend/gvisor's hostTasksPerTask).
func BenchmarkConcurrentWarmCreates(b *testing.B) {
	_, name := testutil.TestImage(b)
	s := newStack(b, engine.Config{
		WarmPools:    []engine.PoolConfig{{Template: name, Size: concurrentCreates}},
		DefaultPids:  256,
		WarmMemoryMB: concurrentCreates << 10,
	})
	benchBursts(b, s, func() {
		deadline := time.Now().Add(5 * time.Minute)
		for s.rt.Engine().WarmIdle(name) < concurrentCreates {
			if time.Now().After(deadline) {
				b.Fatal("the warm pool did not fill within five minutes")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// BenchmarkConcurrentColdCreates is the same burst with no pool: every
// create boots, through admission's turns and queue (and the SDK's
// retries of a 429).
func BenchmarkConcurrentColdCreates(b *testing.B) {
	s := newStack(b, engine.Config{DefaultPids: 256})
	benchBursts(b, s, func() {})
}

// benchBursts runs b.N bursts of concurrentCreates creates on s, ready
// called before each outside the timer, and reports the latencies' p50
// and p95 over all bursts and the idle memory of the last burst's
// sandboxes.
func benchBursts(b *testing.B, s *stack, ready func()) {
	ctx := context.Background()
	var latencies []float64
	var idle []float64
	for b.Loop() {
		b.StopTimer()
		ready()
		b.StartTimer()
		sandboxes := make([]*sdk.Sandbox, concurrentCreates)
		took := make([]time.Duration, concurrentCreates)
		errs := make([]error, concurrentCreates)
		var wg sync.WaitGroup
		for i := range concurrentCreates {
			wg.Go(func() {
				start := time.Now()
				sandboxes[i], errs[i] = s.client.Create(ctx, sdk.CreateOptions{})
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		b.StopTimer()
		ids := make([]string, 0, concurrentCreates)
		for i, err := range errs {
			if err != nil {
				b.Errorf("create %d of the burst: %v", i, err)
				continue
			}
			latencies = append(latencies, float64(took[i])/float64(time.Millisecond))
			ids = append(ids, sandboxes[i].ID())
		}
		time.Sleep(3 * time.Second) // idle, as tupper bench reads them
		idle = idle[:0]
		for _, mib := range bench.SandboxMemory(ids) {
			idle = append(idle, mib)
		}
		var kills sync.WaitGroup
		for _, sb := range sandboxes {
			if sb != nil {
				kills.Go(func() { _ = sb.Kill(ctx) })
			}
		}
		kills.Wait()
		b.StartTimer()
	}
	lat := bench.Summarize(latencies)
	b.ReportMetric(lat.Median, "p50-ms")
	b.ReportMetric(lat.P95, "p95-ms")
	b.ReportMetric(bench.Summarize(idle).Median, "idle-MiB")
}
