//go:build !linux

package runc

import (
	"context"
	"fmt"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
)

// Backend runs Linux containers, which exist only on Linux: elsewhere New
// fails with errdefs.ErrNotSupported, and the type only stands in for the
// Linux one.
type Backend struct{ backend.Unsupported }

var errUnsupported = fmt.Errorf("runc backend: unsupported on this OS: %w", errdefs.ErrNotSupported)

// New fails with errdefs.ErrNotSupported outside Linux.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

// check says that runc runs only on Linux.
func check(context.Context) []backend.Finding {
	return []backend.Finding{{What: "operating system", Detail: "runc runs Linux containers, only on Linux",
		Fix: "use this host's own backend, or run tupper serve on a Linux machine and point the client at it (TUPPER_API_URL)"}}
}
