package engine

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// Stats is a sandbox's resource use at one moment, as its backend measures
// it from the host: the CPU time it has used since it booted (or was last
// resumed), and its memory in use.
type Stats = backend.Stats

// Stats returns running sandbox id's resource use as its backend sees it
// from the host side (see backend.StatsReader). A paused sandbox fails
// with errdefs.ErrFailedPrecondition, and a backend that cannot tell with
// errdefs.ErrNotSupported: the agent inside the sandbox can still say.
func (e *Engine) Stats(ctx context.Context, id string) (*Stats, error) {
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	state := l.rec.State
	e.mu.Unlock()
	if state != store.StateRunning {
		return nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	sr, ok := l.be.(backend.StatsReader)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: the %s backend reports no stats: %w", id, l.beName, errdefs.ErrNotSupported)
	}
	return sr.Stats(ctx, id)
}
