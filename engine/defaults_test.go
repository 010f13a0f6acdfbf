package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// TestDefaultLimits checks that the operator's default limits (serve's
// --cpus, --memory and --pids) reach a sandbox whose create names none,
// that a create's own limits win over them, and that negative defaults
// are refused.
func TestDefaultLimits(t *testing.T) {
	ctx := context.Background()
	fake := backendtest.NewFake()
	e := newEngineOn(t, fake, func(c *Config) { c.DefaultCPUs, c.DefaultMemoryMB, c.DefaultPids = 0.5, 384, 256 })
	sb, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := fake.Spec(sb.ID).Resources
	if r.CPUs != 0.5 || r.MemoryBytes != 384<<20 || r.Pids != 256 {
		t.Errorf("a create naming no limits got %g CPUs, %d bytes, %d pids; want the defaults 0.5, %d, 256", r.CPUs, r.MemoryBytes, r.Pids, 384<<20)
	}
	own, err := e.Create(ctx, CreateOptions{CPUs: 1, MemoryMB: 512, Pids: 100})
	if err != nil {
		t.Fatal(err)
	}
	r = fake.Spec(own.ID).Resources
	if r.CPUs != 1 || r.MemoryBytes != 512<<20 || r.Pids != 100 {
		t.Errorf("a create naming its limits got %g CPUs, %d bytes, %d pids; want its own 1, %d, 100", r.CPUs, r.MemoryBytes, r.Pids, 512<<20)
	}
	for _, bad := range []Config{{}, {DefaultCPUs: -1}, {DefaultMemoryMB: -1}, {DefaultPids: -1}} {
		cfg := Config{Root: t.TempDir(), Backend: fake, BackendName: "fake", Images: stubImages{t.TempDir()}, AgentPath: "/bin/true",
			DefaultCPUs: bad.DefaultCPUs, DefaultMemoryMB: bad.DefaultMemoryMB, DefaultPids: bad.DefaultPids}
		err := cfg.Validate()
		if bad.DefaultCPUs == 0 && bad.DefaultMemoryMB == 0 && bad.DefaultPids == 0 {
			if err != nil {
				t.Fatalf("Validate of a good config: %v", err)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Validate with defaults %g CPUs, %d MB, %d pids = %v, want ErrInvalidArgument", bad.DefaultCPUs, bad.DefaultMemoryMB, bad.DefaultPids, err)
		}
	}
}
