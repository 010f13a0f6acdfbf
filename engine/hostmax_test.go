package engine

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// TestCreateLimitsWithinHost checks that a create may not ask for more
// memory or CPUs than the host has (a review created a sandbox of 64 GiB
// and 1000 CPUs on a host of 24 GiB and 2 cores: its cgroup limits were no
// limits, and a memory bomb in it would have run the host out of memory),
// that the refusal says what the maximum is, that nothing reaches the
// backend, and that the host's own figures are still accepted.
func TestCreateLimitsWithinHost(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	e := newEngineOn(t, b, nil)
	hostMB, ok := memTotalKB()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	if e.cfg.MaxMemoryMB != int(hostMB>>10) || e.cfg.MaxCPUs != float64(runtime.NumCPU()) {
		t.Errorf("default maxima %d MB and %g CPUs, want the host's %d MB and %d CPUs", e.cfg.MaxMemoryMB, e.cfg.MaxCPUs, hostMB>>10, runtime.NumCPU())
	}
	for _, tc := range []struct {
		opts CreateOptions
		want string
	}{
		{CreateOptions{MemoryMB: int(hostMB>>10) + 1}, "above this server's maximum"},
		{CreateOptions{MemoryMB: 1 << 20}, "above this server's maximum"},
		{CreateOptions{CPUs: float64(runtime.NumCPU()) + 1}, "above this server's maximum"},
		{CreateOptions{CPUs: 1000}, "above this server's maximum"},
	} {
		_, err := e.Create(ctx, tc.opts)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create with %d MB and %g CPUs: %v, want invalid argument saying %q", tc.opts.MemoryMB, tc.opts.CPUs, err, tc.want)
		}
	}
	if ids, _ := b.List(ctx); len(ids) != 0 {
		t.Errorf("refused creates started sandboxes %v", ids)
	}
	sb, err := e.Create(ctx, CreateOptions{MemoryMB: int(hostMB >> 10), CPUs: float64(runtime.NumCPU())})
	if err != nil {
		t.Fatalf("create with the host's memory and CPUs: %v", err)
	}
	if sb.MemoryMB != int(hostMB>>10) {
		t.Errorf("created with %d MB, want %d", sb.MemoryMB, hostMB>>10)
	}

	// An operator's maxima apply, and may not be below the defaults.
	e2 := newEngineOn(t, backendtest.NewFake(), func(c *Config) { c.MaxMemoryMB, c.MaxCPUs = 2048, 1 })
	if _, err := e2.Create(ctx, CreateOptions{MemoryMB: 4096}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("create of 4096 MB under a 2048 MB maximum: %v", err)
	}
	cfg := Config{Root: t.TempDir(), Backend: b, Images: stubImages{t.TempDir()}, AgentPath: "/proc/self/exe", DefaultMemoryMB: 4096, MaxMemoryMB: 2048}
	if err := cfg.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a default of 4096 MB above a maximum of 2048 MB: %v, want invalid argument", err)
	}
}
