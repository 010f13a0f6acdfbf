package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkCreateToFirstCommandWarm is BenchmarkCreateToFirstCommand with
// a warm pool of the template: each create takes a booted sandbox (the
// pool refills between iterations, outside the timer). Beside it in one
// run: BenchmarkCreateToFirstCommand (cold) and backend/gvisor's
// BenchmarkRawRunscRun.
func BenchmarkCreateToFirstCommandWarm(b *testing.B) {
	_, name := testutil.TestImage(b)
	s := newStack(b, engine.Config{WarmPools: []engine.PoolConfig{{Template: name, Size: 2}}})
	eng := s.rt.Engine()
	ctx := context.Background()
	ready := func() {
		deadline := time.Now().Add(time.Minute)
		for eng.WarmIdle(name) < 2 {
			if time.Now().After(deadline) {
				b.Fatal("the warm pool did not refill within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ready()
	warm := 0
	for b.Loop() {
		sb, err := s.client.Create(ctx, sdk.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Commands.Run(ctx, "true"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if info, err := eng.Get(ctx, sb.ID()); err == nil && info.Warm {
			warm++
		}
		if err := sb.Kill(ctx); err != nil {
			b.Fatal(err)
		}
		ready()
		b.StartTimer()
	}
	b.ReportMetric(float64(warm)/float64(b.N), "warm-share")
}
