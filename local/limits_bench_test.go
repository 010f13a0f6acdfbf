package local_test

import (
	"context"
	"os"
	"path/filepath"
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
// loaded round trip is paired with one taken just before with the noisy
// sandboxes frozen (their cgroups' freezer), so both figures of a pair
// see the same machine: other work on the host comes and goes, the ratio
// stays. The ratio of the medians is the figure to read ("x-idle"); the
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
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(h.Stderr(), "Resource temporarily unavailable") {
			if time.Now().After(deadline) {
				b.Fatal("the bomb reached no limit in 2 minutes")
			}
			time.Sleep(200 * time.Millisecond)
		}
		return sb
	}

	loaded := func(name string, noise ...func(*testing.B) *sdk.Sandbox) {
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			var ids []string
			for _, n := range noise {
				sb := n(b)
				ids = append(ids, sb.ID())
				defer sb.Kill(ctx)
			}
			var idle, busy []time.Duration
			for range b.N {
				freeze(b, true, ids...)
				idle = append(idle, roundTrip(b))
				freeze(b, false, ids...)
				time.Sleep(200 * time.Millisecond) // the noise is back in full
				b.StartTimer()
				busy = append(busy, roundTrip(b))
				b.StopTimer()
			}
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

// freeze freezes or thaws the sandboxes ids through their cgroups'
// freezer (v1) or cgroup.freeze (v2), and waits until it took.
func freeze(tb testing.TB, frozen bool, ids ...string) {
	tb.Helper()
	for _, id := range ids {
		v1 := filepath.Join("/sys/fs/cgroup/freezer/tupper", id, "freezer.state")
		v2 := filepath.Join("/sys/fs/cgroup/tupper", id, "cgroup.freeze")
		file, want := v1, "THAWED"
		if frozen {
			want = "FROZEN"
		}
		if _, err := os.Stat(v1); err != nil {
			file, want = v2, "0"
			if frozen {
				want = "1"
			}
		}
		if err := os.WriteFile(file, []byte(want), 0); err != nil {
			tb.Fatalf("freeze %s: %v", id, err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			b, err := os.ReadFile(file)
			if err == nil && strings.TrimSpace(string(b)) == want {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s: %q, want %s", file, b, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
