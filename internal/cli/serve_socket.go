package cli

import (
	"errors"
	"io/fs"
	"log/slog"
	"net"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/server"
)

// listenSocket opens `tupper serve`'s local socket for root (see package
// localsock), through which root and the members of group tupper on this
// host use the daemon with no key. It must be called once the root is
// locked, so that the socket of a root is only ever a live daemon's. A
// daemon that may not make it (one not run as root) goes on without it,
// with a warning, as does one on a system that has none; one whose
// socket another daemon holds fails.
func listenSocket(root string, log *slog.Logger) (net.Listener, error) {
	path := localsock.Of(root)
	if path == "" {
		return nil, nil
	}
	ln, err := server.ListenSocket(path, server.SocketOptions{})
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, fs.ErrPermission), errors.Is(err, errdefs.ErrNotSupported):
		log.Warn("no local socket: clients on this host need an API key", "socket", path, "err", err)
		return nil, nil
	}
	return nil, err
}
