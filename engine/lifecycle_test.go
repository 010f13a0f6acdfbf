package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// killLog records OnKilled calls.
type killLog struct {
	mu  sync.Mutex
	ids []string
	ch  chan string
}

func newKillLog() *killLog { return &killLog{ch: make(chan string, 64)} }

func (k *killLog) onKilled(id string) {
	k.mu.Lock()
	k.ids = append(k.ids, id)
	k.mu.Unlock()
	k.ch <- id
}

func (k *killLog) count(id string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, got := range k.ids {
		if got == id {
			n++
		}
	}
	return n
}

// waitKilled waits for OnKilled of id.
func (k *killLog) waitKilled(t *testing.T, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-k.ch:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("OnKilled(%s) never came", id)
		}
	}
}

// killedReason returns the recorded kill reason of sandbox id.
func killedReason(t *testing.T, e *Engine, id string) string {
	t.Helper()
	killed, _, err := e.List(context.Background(), ListOptions{States: []string{"killed"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range killed {
		if sb.ID == id {
			return sb.KillReason
		}
	}
	t.Fatalf("no killed record of %s", id)
	return ""
}

// TestExpiry checks that a sandbox whose time runs out is stopped, recorded
// killed by its timeout, and announced through OnKilled once.
func TestExpiry(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	kills := newKillLog()
	e := newEngineOn(t, b, func(c *Config) { c.OnKilled = kills.onKilled })
	sb, err := e.Create(ctx, CreateOptions{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kills.waitKilled(t, sb.ID)
	if _, err := e.Get(ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Get after expiry: %v, want not found", err)
	}
	if r := killedReason(t, e, sb.ID); r != "timeout" {
		t.Errorf("kill reason %q, want timeout", r)
	}
	if !slices.Contains(b.Stopped(), sb.ID) {
		t.Errorf("the backend never stopped the expired sandbox: stopped %v", b.Stopped())
	}
	if e.Kill(ctx, sb.ID) == nil {
		t.Error("a kill after expiry succeeded")
	}
	if n := kills.count(sb.ID); n != 1 {
		t.Errorf("OnKilled called %d times, want once", n)
	}
}

// TestSetTimeoutRacesExpiry extends sandboxes at the moment their time runs
// out: an extension that answers success must keep its sandbox alive, and
// one that fails must be because the sandbox was already gone.
func TestSetTimeoutRacesExpiry(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	e := newEngineOn(t, b, nil)
	const rounds = 20
	var wg sync.WaitGroup
	for i := range rounds {
		sb, err := e.Create(ctx, CreateOptions{Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Aim around the end, a little before and after.
			time.Sleep(time.Duration(40+i%3*5) * time.Millisecond)
			err := e.SetTimeout(ctx, sb.ID, time.Hour)
			time.Sleep(100 * time.Millisecond) // past the old end
			_, getErr := e.Get(ctx, sb.ID)
			switch {
			case err == nil && getErr != nil:
				t.Errorf("sandbox %s: extended, then gone: %v", sb.ID, getErr)
			case err != nil && !errdefs.IsNotFound(err):
				t.Errorf("sandbox %s: extension failed with %v, want not found", sb.ID, err)
			case err != nil && getErr == nil:
				t.Errorf("sandbox %s: extension refused, but the sandbox lives", sb.ID)
			}
		}()
	}
	wg.Wait()
}

// TestStopRetries checks that a kill whose backend stop fails leaves the
// sandbox tracked, not leaked, and that the engine stops it on its own
// once the backend works again.
func TestStopRetries(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	kills := newKillLog()
	e := newEngineOn(t, b, func(c *Config) {
		c.OnKilled = kills.onKilled
		c.StopRetry = 100 * time.Millisecond
	})
	sb, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.FailStops(2, errors.New("runsc kill: device or resource busy"))
	if err := e.Kill(ctx, sb.ID); err == nil {
		t.Fatal("a kill whose stop failed answered success")
	}
	if !slices.Contains(e.Running(), sb.ID) {
		t.Fatalf("after a failed stop the engine no longer tracks %s: running %v", sb.ID, e.Running())
	}
	if n := kills.count(sb.ID); n != 0 {
		t.Errorf("OnKilled called for a sandbox that still runs")
	}
	// Two failures (the kill's and the first retry's), then a stop.
	kills.waitKilled(t, sb.ID)
	if held, _ := b.List(ctx); slices.Contains(held, sb.ID) {
		t.Errorf("the backend still holds %s after the retry", sb.ID)
	}
	if slices.Contains(e.Running(), sb.ID) {
		t.Errorf("the engine still tracks %s", sb.ID)
	}
}

// TestCrashDetected checks that a sandbox ending on its own is recorded
// killed with the reason at once, announced, and cleaned from the backend.
func TestCrashDetected(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	kills := newKillLog()
	e := newEngineOn(t, b, func(c *Config) { c.OnKilled = kills.onKilled })
	sb, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Crash(sb.ID); err != nil {
		t.Fatal(err)
	}
	kills.waitKilled(t, sb.ID)
	if r := killedReason(t, e, sb.ID); r != exitedReason {
		t.Errorf("kill reason %q, want %q", r, exitedReason)
	}
	if held, _ := b.List(ctx); slices.Contains(held, sb.ID) {
		t.Errorf("the crashed sandbox's leftovers were not stopped: backend holds %v", held)
	}
	if _, err := e.Get(ctx, other.ID); err != nil {
		t.Errorf("a neighbour of the crashed sandbox: %v", err)
	}
	if n := kills.count(sb.ID); n != 1 {
		t.Errorf("OnKilled called %d times, want once", n)
	}
}

// TestFailedCreateLeavesNothing checks that a create whose backend fails
// leaves no record, no lease and nothing running.
func TestFailedCreateLeavesNothing(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	imgs := &leasingImages{stubImages: stubImages{t.TempDir()}, leases: map[string]string{}}
	e := newEngineOn(t, b, func(c *Config) { c.Images = imgs })
	b.FailStarts(errors.New("runsc create: no space left on device"))
	if _, err := e.Create(ctx, CreateOptions{}); err == nil {
		t.Fatal("a create whose backend failed answered success")
	}
	all, _, err := e.List(ctx, ListOptions{States: []string{"creating", "running", "paused", "killed"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 0 {
		t.Errorf("records left by a failed create: %+v", all)
	}
	if h, _ := imgs.Holders(ctx, ""); len(h) != 0 {
		t.Errorf("leases left by a failed create: %v", h)
	}
	if held, _ := b.List(ctx); len(held) != 0 {
		t.Errorf("backend holds %v after a failed create", held)
	}
}

// TestMetadataBounds checks that a create's metadata, kept with the
// sandbox and sent in every listing, is bounded with a clear error.
func TestMetadataBounds(t *testing.T) {
	e := newEngineOn(t, backendtest.NewFake(), nil)
	ctx := context.Background()
	big := map[string]string{}
	for i := range 10 {
		big[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 8<<10)
	}
	for name, md := range map[string]map[string]string{
		"value": {"k": strings.Repeat("v", 8<<10+1)},
		"key":   {strings.Repeat("k", 257): "v"},
		"empty": {"": "v"},
		"total": big,
	} {
		if _, err := e.Create(ctx, CreateOptions{Metadata: md}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "metadata") {
			t.Errorf("%s: create = %v, want invalid argument naming the metadata", name, err)
		}
	}
	if _, err := e.Create(ctx, CreateOptions{Metadata: map[string]string{"k": strings.Repeat("v", 8<<10)}}); err != nil {
		t.Errorf("metadata within bounds: %v", err)
	}
}

// TestEnvBounds checks that environment variables the agent could never
// be started with (exec refuses one of 128 KiB or more) are refused at
// once, as the caller's mistake, rather than failing the boot as if the
// host were at fault.
func TestEnvBounds(t *testing.T) {
	e := newEngineOn(t, backendtest.NewFake(), nil)
	ctx := context.Background()
	many := map[string]string{}
	for i := range 12 {
		many[fmt.Sprintf("V%d", i)] = strings.Repeat("v", 100<<10)
	}
	for name, env := range map[string]map[string]string{
		"one too long": {"BIG": strings.Repeat("v", 128<<10)},
		"all too long": many,
		"NUL":          {"K": "a\x00b"},
	} {
		if _, err := e.Create(ctx, CreateOptions{Env: env}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "environment") {
			t.Errorf("%s: create = %v, want invalid argument naming the environment", name, err)
		}
	}
	if _, err := e.Create(ctx, CreateOptions{Env: map[string]string{"K": strings.Repeat("v", 100<<10)}}); err != nil {
		t.Errorf("a 100 KiB variable: %v", err)
	}
}
