package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
)

// ListenSocket listens on the unix socket at path, for ListenOptions.Socket
// to serve: mode 0660, its group opts.Group when that exists, so that only
// root and the group's members may connect, as with Docker's socket. Each
// connection is judged by its peer's credentials (see SocketOptions). A
// socket left at path by a daemon that died is removed; one that a live
// daemon listens on is not, and fails with errdefs.ErrAlreadyExists.
// Closing the listener removes the socket.
func ListenSocket(path string, opts SocketOptions) (net.Listener, error) {
	if opts.Group == "" {
		opts.Group = localsock.Group
	}
	trust := &socketTrust{path: path, group: opts.Group}
	if g, err := user.LookupGroup(opts.Group); err == nil {
		if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			trust.gid, trust.hasGroup = uint32(gid), true
		}
	}
	if err := clearStaleSocket(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("serve: socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("serve: socket %s: %w", path, err)
	}
	// Until these two are done the socket may be open wider than meant;
	// every connection is judged by its credentials all the same.
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("serve: socket %s: %w", path, err)
	}
	if trust.hasGroup {
		if err := os.Chown(path, -1, int(trust.gid)); err != nil {
			ln.Close()
			return nil, fmt.Errorf("serve: socket %s: give it to group %s: %w", path, opts.Group, err)
		}
	}
	return &socketListener{UnixListener: ln, trust: trust}, nil
}

// clearStaleSocket removes the socket at path when nothing listens on it.
func clearStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve: socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("serve: socket %s: something that is not a socket is there; remove it: %w", path, errdefs.ErrAlreadyExists)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("serve: socket %s: another tupper serve listens on it: %w", path, errdefs.ErrAlreadyExists)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("serve: socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("serve: remove the stale socket %s: %w", path, err)
	}
	return nil
}

// socketListener accepts connections on the local socket and learns each
// one's peer.
type socketListener struct {
	*net.UnixListener
	trust *socketTrust
}

func (l *socketListener) Accept() (net.Conn, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	p := peerOf(c)
	return &socketConn{UnixConn: c, peer: &socketPeer{Peer: p, trusted: l.trust.trusts(p), trust: l.trust}}, nil
}

// peerOf asks the kernel who is at the other end of c: the credentials
// and the supplementary groups it connected with (SO_PEERCRED,
// SO_PEERGROUPS).
func peerOf(c *net.UnixConn) Peer {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{Err: err}
	}
	var (
		cred              *unix.Ucred
		groups            []uint32
		credErr, groupErr error
	)
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups, groupErr = peerGroups(int(fd))
	}); err != nil {
		return Peer{Err: err}
	}
	if credErr != nil {
		return Peer{Err: fmt.Errorf("SO_PEERCRED: %w", credErr)}
	}
	p := Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Groups: groups}
	if errors.Is(groupErr, unix.ENOPROTOOPT) && p.UID != 0 && p.PID > 0 {
		p.Groups = procGroups(p)
	}
	return p
}

// procGroups reads the supplementary groups of peer p from /proc, for
// kernels older than SO_PEERGROUPS (4.13). They are the process's now,
// not when it connected: they are believed only while it still has the
// uid it connected with, since otherwise its pid went to another process,
// whose groups say nothing of the peer.
func procGroups(p Peer) []uint32 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(int(p.PID)) + "/status")
	if st := parseProcStatus(string(data)); err == nil && st.ok && st.euid == p.UID {
		return st.groups
	}
	return nil
}
