package local_test

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkNeighbourRoundTrip measures what a noisy sandbox costs its
// neighbour: the neighbour's command round trip (`echo hi` through the
// whole stack) while another sandbox spins on every core, while another
// runs a fork bomb, and while both do, each against the same round trip
// with nothing else running, measured first in the same run. The ratios
// are the figures to read ("x-idle"); the target is under 2.
//
//	go test -run '^$' -bench NeighbourRoundTrip -benchtime 20x ./local/
func BenchmarkNeighbourRoundTrip(b *testing.B) {
	s := newStack(b, engine.Config{})
	ctx := context.Background()
	// Long-lived: the whole benchmark outlives the default timeout.
	const life = time.Hour
	neighbour := s.create(b, sdk.CreateOptions{Timeout: life})
	roundTrip := func(b *testing.B) time.Duration {
		var times []time.Duration
		for b.Loop() {
			begin := time.Now()
			res, err := neighbour.Commands.Run(ctx, "echo hi")
			if err != nil || res.Stdout != "hi\n" {
				b.Fatalf("neighbour: %v %v", res, err)
			}
			times = append(times, time.Since(begin))
		}
		slices.Sort(times)
		med := times[len(times)/2]
		b.ReportMetric(float64(med.Microseconds())/1000, "median-ms")
		return med
	}
	// A spinner with a quota of every core the host has.
	spinner := func(b *testing.B) func() {
		sb := s.create(b, sdk.CreateOptions{CPUs: float64(runtime.NumCPU()), Timeout: life})
		h, err := sb.Commands.Start(ctx, `for i in $(seq $(nproc)); do (while :; do :; done) & done; wait`)
		if err != nil {
			b.Fatal(err)
		}
		return func() { h.Kill(ctx); sb.Kill(ctx) }
	}
	// The classic bomb, as the default user, left running: it churns at
	// its limit for as long as it lives.
	bomber := func(b *testing.B) func() {
		sb := s.create(b, sdk.CreateOptions{Timeout: life})
		h, err := sb.Commands.Start(ctx, `bomb() { bomb | bomb & }; bomb; sleep 600`)
		if err != nil {
			b.Fatal(err)
		}
		// Measure once it is at its limit.
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(h.Stderr(), "Resource temporarily unavailable") && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		return func() { h.Kill(ctx); sb.Kill(ctx) }
	}

	var idle time.Duration
	b.Run("idle", func(b *testing.B) { idle = roundTrip(b) })
	loaded := func(name string, noise ...func(*testing.B) func()) {
		b.Run(name, func(b *testing.B) {
			if idle == 0 {
				b.Skip("no idle figure")
			}
			b.StopTimer()
			for _, n := range noise {
				defer n(b)()
			}
			b.StartTimer()
			med := roundTrip(b)
			b.ReportMetric(float64(med)/float64(idle), "x-idle")
		})
	}
	loaded("spinner", spinner)
	loaded("forkbomb", bomber)
	loaded("spinner+forkbomb", spinner, bomber)
}
