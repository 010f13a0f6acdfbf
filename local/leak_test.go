package local_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestNoLeaksAfterCycles creates and kills sandboxes 50 times, in the ways
// a sandbox can end (killed while idle, while a command runs, after its
// processes crashed), and finds nothing of them left on the host.
func TestNoLeaksAfterCycles(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots 50 gVisor sandboxes")
	}
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	// One sandbox lives on beside the cycles: the cycles must not disturb it.
	bystander := s.create(t, sdk.CreateOptions{})
	baseline := treeOf(t, s.cfg.Root+"/backends")

	var ids []string
	for i := range 50 {
		sb := s.create(t, sdk.CreateOptions{Timeout: 10 * time.Minute})
		ids = append(ids, sb.ID())
		switch i % 3 {
		case 0: // idle
		case 1: // a command still running
			if _, err := sb.Commands.Start(ctx, "sleep 600", sdk.WithTimeout(0)); err != nil {
				t.Fatalf("cycle %d: start: %v", i, err)
			}
		case 2: // the sandbox crashed: its host processes died, and the
			// engine cleans up on its own.
			testutil.CrashSandbox(t, sb.ID())
			testutil.WaitFor(t, 30*time.Second, "the engine to notice the crash", func() bool {
				_, err := sb.GetInfo(ctx)
				return errors.Is(err, errdefs.ErrNotFound)
			})
			continue
		}
		if err := sb.Kill(ctx); err != nil {
			t.Fatalf("cycle %d: kill %s: %v", i, sb.ID(), err)
		}
	}
	// The bystander's own things are in the baseline; everything else
	// must be gone.
	if left := leftovers(t, s.cfg.Root, baseline, bystander.ID(), ids...); len(left) > 0 {
		t.Errorf("after 50 create/kill cycles the host still holds:\n%s", strings.Join(left, "\n"))
	}
	if got := run(t, bystander, "echo alive").Stdout; got != "alive\n" {
		t.Errorf("the bystander sandbox answered %q", got)
	}
	if err := bystander.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.cfg.Root, nil, "", bystander.ID()); len(left) > 0 {
		t.Errorf("after the last kill the host still holds:\n%s", strings.Join(left, "\n"))
	}
}
