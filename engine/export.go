package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// ExportChanges writes what running sandbox id changed in its files since
// it booted as an OCI image layer (see backend.Exporter) to w: a template
// build commits its steps with it.
func (e *Engine) ExportChanges(ctx context.Context, id string, w io.Writer) error {
	if err := e.checkScope(ctx, id); err != nil {
		return err
	}
	l, err := e.liveOf(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	state := l.rec.State
	e.mu.Unlock()
	if state != store.StateRunning {
		return fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	ex, ok := l.be.(backend.Exporter)
	if !ok {
		return fmt.Errorf("export the files of sandbox %q: the %s backend cannot (gvisor can): %w", id, l.beName, errdefs.ErrNotSupported)
	}
	return ex.ExportChanges(ctx, id, w)
}
