package local_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

// BenchmarkCommandPath puts what a command costs inside a sandbox beside
// what it costs through the SDK, in one sandbox of the Debian test image and
// one run:
//
//	ForkExec     fork+exec of /bin/true, timed inside the sandbox
//	BashC        bash -c true, timed inside
//	BashLoginC   bash -l -c true (what every SDK command runs), timed inside
//	RoundTrip    Commands.Run("true"): SDK → agent → bash -l -c true → SDK
//
// The in-sandbox figures come from one command that runs b.N of them in a
// loop and reads the clock before and after (bash's EPOCHREALTIME), so the
// round trip that starts the loop is not in them. RoundTrip ÷ BashLoginC is
// what the agent and the transport add to a command.
//
// With $TUPPER_BENCH_IMAGES and $TUPPER_BENCH_TEMPLATE set, the sandbox is
// of that template in that image store instead, such as the base template
// that `tupper --root DIR image build base` makes (images under DIR/images).
func BenchmarkCommandPath(b *testing.B) {
	s := commandPathStack(b)
	sb := s.create(b, sdk.CreateOptions{})
	inside := func(cmd string) func(*testing.B) {
		return func(b *testing.B) { benchInside(b, sb, cmd) }
	}
	b.Run("ForkExec", inside("/bin/true"))
	b.Run("BashC", inside("/bin/bash -c true"))
	b.Run("BashLoginC", inside("/bin/bash -l -c true"))
	b.Run("RoundTrip", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := sb.Commands.Run(ctx, "true"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchInside runs cmd b.N times in a loop inside sb and reports the time
// the loop took by the sandbox's clock, per run of cmd, as ns/op.
func benchInside(b *testing.B, sb *sdk.Sandbox, cmd string) {
	script := fmt.Sprintf(`s=$EPOCHREALTIME; for ((i=0; i<%d; i++)); do %s; done; e=$EPOCHREALTIME; echo $(( ${e/./} - ${s/./} ))`, b.N, cmd)
	res := run(b, sb, script)
	if res.ExitCode != 0 {
		b.Fatalf("%s: exit %d: %s", cmd, res.ExitCode, res.Stderr)
	}
	micros, err := strconv.ParseInt(strings.TrimSpace(res.Stdout), 10, 64)
	if err != nil {
		b.Fatalf("%s: the loop's time %q: %v", cmd, res.Stdout, err)
	}
	b.ReportMetric(float64(micros)*1e3/float64(b.N), "ns/op")
}

// commandPathStack is newStack, on the template that $TUPPER_BENCH_IMAGES
// and $TUPPER_BENCH_TEMPLATE name when both are set.
func commandPathStack(b *testing.B) *stack {
	images, name := os.Getenv("TUPPER_BENCH_IMAGES"), os.Getenv("TUPPER_BENCH_TEMPLATE")
	if images == "" || name == "" {
		return newStack(b, engine.Config{})
	}
	testutil.RequiresRunsc(b)
	s := &stack{cfg: local.Config{
		Root: shortTempDir(b), ImageRoot: images, AgentPath: testutil.AgentBinary(b),
		Engine: engine.Config{DefaultTemplate: name},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
	s.open(b)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.rt.Engine().KillAll(ctx); err != nil {
			b.Errorf("kill all: %v", err)
		}
		s.rt.Close()
	})
	return s
}
