//go:build !linux

package gvisor

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Backend runs sandboxes with runsc, which exists only on Linux: elsewhere
// New fails and every method fails with errdefs.ErrNotSupported.
type Backend struct{}

var errUnsupported = fmt.Errorf("gvisor backend: unsupported on this OS: %w", errdefs.ErrNotSupported)

// New fails with errdefs.ErrNotSupported outside Linux.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

// Start fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	return nil, errUnsupported
}

// State fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	return "", errUnsupported
}

// Stop fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Stop(ctx context.Context, id string) error { return errUnsupported }

// List fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) List(ctx context.Context) ([]string, error) { return nil, errUnsupported }

// Pause fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Pause(ctx context.Context, id string) error { return errUnsupported }

// Resume fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Resume(ctx context.Context, id string) error { return errUnsupported }

// Stats fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	return nil, errUnsupported
}

// check says that gVisor runs only on Linux.
func check(context.Context) []backend.Finding {
	return []backend.Finding{{What: "operating system", Detail: "gVisor runs only on Linux",
		Fix: "use this host's own backend, or run tupper serve on a Linux machine and point the client at it (TUPPER_API_URL)"}}
}
