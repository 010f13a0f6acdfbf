package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Pause freezes sandbox id with runsc pause. It fails with
// errdefs.ErrNotFound for an unknown id and errdefs.ErrFailedPrecondition
// unless the sandbox runs.
func (b *Backend) Pause(ctx context.Context, id string) error {
	return b.transition(ctx, id, "pause", backend.StateRunning, b.runsc.Pause)
}

// Resume thaws sandbox id with runsc resume. It fails with
// errdefs.ErrNotFound for an unknown id and errdefs.ErrFailedPrecondition
// unless the sandbox is paused.
func (b *Backend) Resume(ctx context.Context, id string) error {
	return b.transition(ctx, id, "resume", backend.StatePaused, b.runsc.Resume)
}

func (b *Backend) transition(ctx context.Context, id, op string, from backend.State, do func(context.Context, string) error) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	st, err := b.State(ctx, id)
	if err != nil {
		return err
	}
	if st != from {
		return fmt.Errorf("sandbox %q: %s: sandbox is %s: %w", id, op, st, errdefs.ErrFailedPrecondition)
	}
	rctx, cancel := runscContext(ctx)
	defer cancel()
	if err := do(rctx, id); err != nil {
		return fmt.Errorf("sandbox %q: runsc %s: %w", id, op, err)
	}
	b.log.Info("sandbox "+op+"d", "sandbox", id, "op", op)
	return nil
}

// Stats reports sandbox id's resource use as runsc events --stats sees it:
// CPU time from the host cgroup, memory and task counts from the sentry's
// own accounting (what the sandbox uses, without the sentry's overhead),
// and the memory limit the sandbox was started with.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	st, err := b.State(ctx, id)
	if err != nil {
		return nil, err
	}
	if st != backend.StateRunning {
		return nil, fmt.Errorf("sandbox %q: stats: sandbox is %s: %w", id, st, errdefs.ErrFailedPrecondition)
	}
	s, err := b.runsc.Stats(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: runsc events: %w", id, err)
	}
	out := &backend.Stats{
		CPUUsageNanos:    s.Cpu.Usage.Total,
		MemoryUsageBytes: s.Memory.Usage.Usage,
		Pids:             s.Pids.Current,
	}
	if rec, err := b.readRecord(id); err == nil {
		out.MemoryLimitBytes = uint64(rec.Limits.MemoryBytes)
	}
	return out, nil
}

func (b *Backend) readRecord(id string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(b.bundleDir(id), recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
