package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listenVsock listens on AF_VSOCK port of every CID of this machine: in a
// microVM, that is where the host's side of a virtio-vsock device (for
// Firecracker, the unix socket it serves with its CONNECT handshake)
// reaches the guest. Go's net package does not know AF_VSOCK, so the
// listener drives the socket itself, through the runtime's poller.
func listenVsock(port uint32) (net.Listener, error) {
	return listenSocket(unix.AF_VSOCK, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port})
}

// listenSocket listens on a stream socket of family bound to sa. It
// serves AF_VSOCK, and AF_UNIX in tests, by one code path.
func listenSocket(family int, sa unix.Sockaddr) (net.Listener, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	addr := sockAddr(sa)
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	f := os.NewFile(uintptr(fd), addr.Network()+":"+addr.String())
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &socketListener{f: f, rc: rc, addr: addr}, nil
}

// socketListener is a net.Listener over a listening socket of a family
// that Go's net package does not know.
type socketListener struct {
	f    *os.File
	rc   syscall.RawConn
	addr net.Addr

	closeOnce sync.Once
	closeErr  error
}

func (l *socketListener) Accept() (net.Conn, error) {
	var (
		nfd  int
		sa   unix.Sockaddr
		aerr error
	)
	err := l.rc.Read(func(fd uintptr) bool {
		nfd, sa, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return !errors.Is(aerr, unix.EAGAIN)
	})
	if err != nil {
		// The listener was closed: the poller says so with os.ErrClosed.
		return nil, &net.OpError{Op: "accept", Net: l.addr.Network(), Addr: l.addr, Err: net.ErrClosed}
	}
	if aerr != nil {
		return nil, &net.OpError{Op: "accept", Net: l.addr.Network(), Addr: l.addr, Err: aerr}
	}
	remote := sockAddr(sa)
	local := l.addr
	if lsa, err := unix.Getsockname(nfd); err == nil {
		local = sockAddr(lsa)
	}
	return &socketConn{File: os.NewFile(uintptr(nfd), remote.Network()+":"+remote.String()), local: local, remote: remote}, nil
}

func (l *socketListener) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.f.Close() })
	return l.closeErr
}

func (l *socketListener) Addr() net.Addr { return l.addr }

// socketConn is one accepted connection. *os.File gives it reads,
// writes and deadlines through the runtime's poller.
type socketConn struct {
	*os.File
	local, remote net.Addr
}

func (c *socketConn) LocalAddr() net.Addr  { return c.local }
func (c *socketConn) RemoteAddr() net.Addr { return c.remote }

// CloseWrite shuts the sending half, so that a peer reading to the end
// sees it while its own replies still arrive.
func (c *socketConn) CloseWrite() error {
	rc, err := c.File.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return serr
}

// SetDeadline and its kin are *os.File's; spelled out so that socketConn
// is a net.Conn whatever *os.File adds later.
func (c *socketConn) SetDeadline(t time.Time) error      { return c.File.SetDeadline(t) }
func (c *socketConn) SetReadDeadline(t time.Time) error  { return c.File.SetReadDeadline(t) }
func (c *socketConn) SetWriteDeadline(t time.Time) error { return c.File.SetWriteDeadline(t) }

// vsockAddr is a vsock address: a context id (the machine) and a port.
type vsockAddr struct{ cid, port uint32 }

func (a vsockAddr) Network() string { return "vsock" }
func (a vsockAddr) String() string {
	return strconv.FormatUint(uint64(a.cid), 10) + ":" + strconv.FormatUint(uint64(a.port), 10)
}

// sockAddr turns a socket address into a net.Addr.
func sockAddr(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrVM:
		return vsockAddr{cid: a.CID, port: a.Port}
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return vsockAddr{}
}
