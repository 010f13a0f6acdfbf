package local_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestNoLeaksAfterCycles creates and kills sandboxes 50 times, in the ways
// a sandbox can end (killed while idle, while a command runs, after its
// processes crashed, and a create whose caller gives up mid-boot), and
// finds nothing of them left on the host.
func TestNoLeaksAfterCycles(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots 50 gVisor sandboxes")
	}
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	// One sandbox lives on beside the cycles: the cycles must not disturb it.
	bystander := s.create(t, sdk.CreateOptions{})
	baseline := testutil.Tree(t, s.cfg.Root+"/backends")

	var ids []string
	for i := range 50 {
		if i%4 == 3 {
			// The caller gives up at a different point of the boot each
			// time: the engine must not leave a sandbox nobody knows of.
			if id := s.abandonCreate(t, time.Duration(i/4%5)*150*time.Millisecond); id != "" {
				ids = append(ids, id)
			}
			continue
		}
		sb := s.create(t, sdk.CreateOptions{Timeout: 10 * time.Minute})
		ids = append(ids, sb.ID())
		switch i % 4 {
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
	// The abandoned creates' ids are known only to the engine's records.
	killed, _, err := s.rt.Engine().List(ctx, engine.ListOptions{States: []string{store.StateKilled}})
	if err != nil {
		t.Fatal(err)
	}
	abandoned := 0
	for _, k := range killed {
		if !slices.Contains(ids, k.ID) {
			abandoned++
			ids = append(ids, k.ID)
			if !strings.Contains(k.KillReason, "went away") {
				t.Errorf("abandoned create %s was killed for %q, want its creator going away", k.ID, k.KillReason)
			}
		}
	}
	t.Logf("%d abandoned creates booted a sandbox, which the engine killed", abandoned)
	// The bystander's own things are in the baseline; everything else
	// must be gone.
	if left := s.leftovers(t, baseline, bystander.ID(), ids...); len(left) > 0 {
		t.Errorf("after 50 create/kill cycles the host still holds:\n%s", strings.Join(left, "\n"))
	}
	if got := run(t, bystander, "echo alive").Stdout; got != "alive\n" {
		t.Errorf("the bystander sandbox answered %q", got)
	}
	if err := bystander.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if left := s.leftovers(t, nil, "", bystander.ID()); len(left) > 0 {
		t.Errorf("after the last kill the host still holds:\n%s", strings.Join(left, "\n"))
	}
}

// abandonCreate starts a create and cancels its context after delay, as a
// client that gives up would. When the boot beats the cancel, it kills the
// sandbox and returns its id.
func (s *stack) abandonCreate(t *testing.T, delay time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(delay, cancel)
	defer timer.Stop()
	defer cancel()
	sb, err := s.client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute})
	if err == nil {
		// The boot beat the cancel: this one is a plain create and kill.
		if err := sb.Kill(context.Background()); err != nil {
			t.Fatalf("kill %s: %v", sb.ID(), err)
		}
		return sb.ID()
	}
	return ""
}
