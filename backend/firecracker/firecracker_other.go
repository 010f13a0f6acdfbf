//go:build !linux

package firecracker

import (
	"context"
	"fmt"
	"net"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Backend runs sandboxes as Firecracker microVMs, which exist only on Linux
// with KVM: elsewhere New fails and every method fails with
// errdefs.ErrNotSupported.
type Backend struct{}

var errUnsupported = fmt.Errorf("firecracker backend: unsupported on this OS: %w", errdefs.ErrNotSupported)

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

// Wait fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Wait(ctx context.Context, id string) error { return errUnsupported }

// DialSandbox fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, errUnsupported
}

// Pause fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Pause(ctx context.Context, id string) error { return errUnsupported }

// Resume fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Resume(ctx context.Context, id string) error { return errUnsupported }

// Checkpoint fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error { return errUnsupported }

// Restore fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Restore(ctx context.Context, spec *backend.Spec, dir string) (*backend.Sandbox, error) {
	return nil, errUnsupported
}

// Stats fails with errdefs.ErrNotSupported outside Linux.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	return nil, errUnsupported
}

// check says that Firecracker runs only on Linux.
func check(context.Context) []backend.Finding {
	return []backend.Finding{{What: "operating system", Detail: "Firecracker runs only on Linux with KVM",
		Fix: "use this host's own backend, or run tupper serve on a Linux machine with KVM and point the client at it (TUPPER_API_URL)"}}
}
