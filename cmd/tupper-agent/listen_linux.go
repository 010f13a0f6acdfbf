package main

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenExclusive listens on addr without SO_REUSEADDR, which Go sets on
// every listener. With it, gVisor lets a process in the sandbox bind the
// same port on the sandbox's own address beside the agent's wildcard
// socket, and connections from the daemon, which dials that address,
// would reach it, X-Access-Token and all.
func listenExclusive(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 0)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
