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

// BenchmarkNeighbourRoundTrip measures what noisy sandboxes cost their
// neighbour: the neighbour's command round trip (`echo hi` through the
// whole stack, Go SDK to agent) while one sandbox spins on every core,
// while another runs a fork bomb at its limit, and while both do. Each
// loaded figure is bracketed by the same round trip with nothing else
// running, measured just before the noise starts and just after it ends,
// so that the host's other work, which comes and goes, weighs on both
// sides. The ratio of the medians is the figure to read ("x-idle"); the
// target is under 2.
//
//	go test -run '^$' -bench NeighbourRoundTrip -benchtime 20x ./local/
func BenchmarkNeighbourRoundTrip(b *testing.B) {
	s := newStack(b, engine.Config{})
	ctx := context.Background()
	// Long-lived: the whole benchmark outlives the default timeout.
	const life = time.Hour
	neighbour := s.create(b, sdk.CreateOptions{Timeout: life})
	roundTrip := func(b *testing.B) time.Duration {
		begin := time.Now()
		res, err := neighbour.Commands.Run(ctx, "echo hi")
		if err != nil || res.Stdout != "hi\n" {
			b.Fatalf("neighbour: %v %v", res, err)
		}
		return time.Since(begin)
	}
	samples := func(b *testing.B, n int) []time.Duration {
		var d []time.Duration
		for range n {
			d = append(d, roundTrip(b))
		}
		return d
	}

	// A spinner with a quota of every core the host has.
	spinner := func(b *testing.B) *sdk.Sandbox {
		sb := s.create(b, sdk.CreateOptions{CPUs: float64(runtime.NumCPU()), Timeout: life})
		if _, err := sb.Commands.Start(ctx, `for i in $(seq $(nproc)); do (while :; do :; done) & done; wait`); err != nil {
			b.Fatal(err)
		}
		return sb
	}
	// The classic bomb, as the default user, left running: it churns at
	// its limit for as long as it lives.
	bomber := func(b *testing.B) *sdk.Sandbox {
		sb := s.create(b, sdk.CreateOptions{Timeout: life})
		h, err := sb.Commands.Start(ctx, `bomb() { bomb | bomb & }; bomb; sleep 3600`)
		if err != nil {
			b.Fatal(err)
		}
		// Beside a spinner that takes minutes.
		deadline := time.Now().Add(6 * time.Minute)
		for !strings.Contains(h.Stderr(), "Resource temporarily unavailable") {
			if time.Now().After(deadline) {
				b.Fatal("the bomb reached no limit in 6 minutes")
			}
			time.Sleep(200 * time.Millisecond)
		}
		return sb
	}

	loaded := func(name string, noise ...func(*testing.B) *sdk.Sandbox) {
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			idle := samples(b, b.N)
			var sbs []*sdk.Sandbox
			for _, n := range noise {
				sbs = append(sbs, n(b))
			}
			var busy []time.Duration
			for range b.N {
				b.StartTimer()
				busy = append(busy, roundTrip(b))
				b.StopTimer()
			}
			for _, sb := range sbs {
				if err := sb.Kill(ctx); err != nil {
					b.Fatal(err)
				}
			}
			idle = append(idle, samples(b, b.N)...)
			mi, mb := median(idle), median(busy)
			b.ReportMetric(float64(mi.Microseconds())/1000, "idle-ms")
			b.ReportMetric(float64(mb.Microseconds())/1000, "loaded-ms")
			b.ReportMetric(float64(mb)/float64(mi), "x-idle")
		})
	}
	loaded("spinner", spinner)
	loaded("forkbomb", bomber)
	loaded("spinner+forkbomb", spinner, bomber)
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
