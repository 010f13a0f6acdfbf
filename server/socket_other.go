//go:build !linux

package server

import (
	"fmt"
	"net"

	"github.com/lightbearco/tupper/errdefs"
)

// ListenSocket is Linux's alone: only there does the daemon learn its
// peers' credentials. Elsewhere it fails with errdefs.ErrNotSupported.
func ListenSocket(path string, opts SocketOptions) (net.Listener, error) {
	return nil, fmt.Errorf("serve: socket %s: a local socket needs Linux: %w", path, errdefs.ErrNotSupported)
}
