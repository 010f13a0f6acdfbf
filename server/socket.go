package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
)

// The local socket: `tupper serve` also listens on a unix socket
// (ListenSocket, at localsock.Of(root)), and there the kernel tells who
// connects. Root, and the members of the socket's group, act as the
// operator with no API key: the default team, which the first key the
// daemon prints belongs to too. Anyone else needs a key, as over TCP. A
// request that carries a key acts as that key on either listener, and the
// data plane (sandbox access tokens) is the same on both. TCP, loopback
// included, is never trusted this way: any local user may connect there.

// SocketOptions configure ListenSocket.
type SocketOptions struct {
	// Group is the group whose members the socket lets in besides root;
	// empty means localsock.Group. When it does not exist, only root is
	// let in.
	Group string
}

// Peer is the process at the other end of a connection to the local
// socket, as the kernel saw it when it connected.
type Peer struct {
	// UID and GID are its effective user and group ids.
	UID, GID uint32
	// PID is its process id.
	PID int32
	// Groups are its supplementary group ids when it connected, as the
	// kernel kept them (SO_PEERGROUPS; on kernels without it, read from
	// /proc as the connection is accepted); nil when they could not be
	// had.
	Groups []uint32
	// Err says why the kernel's answer could not be had; such a peer is
	// trusted with nothing.
	Err error
}

// socketTrust is what a socket decides its peers by.
type socketTrust struct {
	// path is the socket's, for messages.
	path string
	// group names the trusted group; gid is its id when hasGroup.
	group    string
	gid      uint32
	hasGroup bool
}

// trusts reports whether p acts as the operator: root, or a process whose
// group or one of whose supplementary groups is the socket's group.
func (t socketTrust) trusts(p Peer) bool {
	switch {
	case p.Err != nil:
		return false
	case p.UID == 0:
		return true
	case !t.hasGroup:
		return false
	}
	return p.GID == t.gid || slices.Contains(p.Groups, t.gid)
}

// refusal is the message of a request from a peer that is not trusted and
// carries no key: it names the socket, the user and the group to join.
func (t socketTrust) refusal(p Peer, user string) string {
	if p.Err != nil {
		return fmt.Sprintf("tupper serve's socket %s could not tell who is connecting (%v): send an API key (X-API-KEY)", t.path, p.Err)
	}
	who := fmt.Sprintf("user %s (uid %d)", user, p.UID)
	if user == "" || user == strconv.FormatUint(uint64(p.UID), 10) {
		who = fmt.Sprintf("uid %d", p.UID)
	}
	join := fmt.Sprintf("join group %s (usermod -aG %s %s, then log in again)", t.group, t.group, userOrID(user, p.UID))
	if !t.hasGroup {
		join = fmt.Sprintf("create group %s, join it (groupadd %s; usermod -aG %s %s) and restart tupper serve", t.group, t.group, t.group, userOrID(user, p.UID))
	}
	return fmt.Sprintf("tupper serve's socket %s lets in root and the members of group %s without an API key; %s is neither: run as root, %s, or send an API key (X-API-KEY, TUPPER_API_KEY)",
		t.path, t.group, who, join)
}

func userOrID(user string, uid uint32) string {
	if user != "" {
		return user
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// socketPeer is a connection's peer on the local socket, with the
// decision about it, made once when the connection was accepted.
type socketPeer struct {
	Peer
	trusted bool
	trust   *socketTrust
}

// socketConn is a connection accepted on the local socket.
type socketConn struct {
	*net.UnixConn
	peer *socketPeer
}

type socketPeerKey struct{}

// connContext is the http.Server's ConnContext: a connection from the
// local socket brings its peer into the context of each of its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*socketConn); ok {
		return context.WithValue(ctx, socketPeerKey{}, sc.peer)
	}
	return ctx
}

// socketPeerFrom returns the peer of a request that came in on the local
// socket, and false for one that came over TCP.
func socketPeerFrom(ctx context.Context) (*socketPeer, bool) {
	p, ok := ctx.Value(socketPeerKey{}).(*socketPeer)
	return p, ok
}

// procStatus is what /proc/PID/status says of a process's credentials.
type procStatus struct {
	// euid is its effective user id; ok when the file named one.
	euid uint32
	ok   bool
	// groups are its supplementary groups.
	groups []uint32
}

// parseProcStatus reads the Uid and Groups lines of /proc/PID/status.
func parseProcStatus(data string) procStatus {
	var st procStatus
	for _, line := range strings.Split(data, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		switch name {
		case "Uid":
			// Real, effective, saved and file system uids.
			if len(fields) >= 2 {
				if n, err := strconv.ParseUint(fields[1], 10, 32); err == nil {
					st.euid, st.ok = uint32(n), true
				}
			}
		case "Groups":
			for _, f := range fields {
				if n, err := strconv.ParseUint(f, 10, 32); err == nil {
					st.groups = append(st.groups, uint32(n))
				}
			}
		}
	}
	return st
}

// serveSocketPeer serves a request without an API key that came in on the
// local socket: a trusted peer's as the operator's, in the default team
// (that of the first key `tupper serve` prints), and anyone else's with 403
// and what to do.
func (s *Server) serveSocketPeer(w http.ResponseWriter, r *http.Request, p *socketPeer, next http.Handler) {
	if !p.trusted {
		name := ""
		if p.Err == nil {
			if u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10)); err == nil {
				name = u.Username
			}
		}
		writeStatus(w, http.StatusForbidden, p.trust.refusal(p.Peer, name))
		return
	}
	next.ServeHTTP(w, r.WithContext(engine.WithScope(r.Context(), engine.Scope{Team: auth.DefaultTeam})))
}
