package engine

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// The way into a sandbox is the engine's: the backend says how to reach a
// port inside it (TCP to its address today; a vsock or a unix socket for
// VM backends), and nothing above the engine knows. HTTP clients name a
// sandbox's port with SandboxAddr and dial through Engine.DialContext,
// so that one connection pool serves every sandbox, keyed by sandbox
// rather than by address (addresses are reused once a sandbox dies, and
// a kept-alive connection to the old one must never serve the new one).
//
// Every connection the engine dials is cut the moment its sandbox stops
// being live (a kill, a timeout, a crash): a dead sandbox's network
// vanishes without closing anything, and requests to it would otherwise
// hang until TCP gave up, minutes later. This is the one place that ends
// the requests to a sandbox that died.

// sandboxDomain ends the host names of SandboxAddr; .invalid never
// resolves, so a name that escaped the engine's dialer reaches nothing.
const sandboxDomain = ".sandbox.tupper.invalid"

// SandboxAddr returns the address ("host:port") that names port inside
// sandbox id for Engine.DialContext; use it as the host of URLs.
func SandboxAddr(id string, port int) string {
	return net.JoinHostPort(id+sandboxDomain, strconv.Itoa(port))
}

// parseSandboxAddr undoes SandboxAddr.
func parseSandboxAddr(addr string) (id string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err == nil {
		port, err = strconv.Atoi(p)
	}
	id, ok := strings.CutSuffix(host, sandboxDomain)
	if err != nil || !ok || id == "" || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("address %q does not name a sandbox port: %w", addr, errdefs.ErrInvalidArgument)
	}
	return id, port, nil
}

// DialContext connects to the sandbox port that addr names (see
// SandboxAddr); it has the signature of net.Dialer.DialContext, for
// http.Transport. It fails with errdefs.ErrNotFound when the sandbox is
// not live, and the connection is closed when the sandbox stops being
// live.
func (e *Engine) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	id, port, err := parseSandboxAddr(addr)
	if err != nil {
		return nil, err
	}
	return e.Dial(ctx, id, port)
}

// Dial connects to port inside live sandbox id; see DialContext.
func (e *Engine) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	e.mu.Lock()
	l, ok := e.live[id]
	var agentAddr string
	var paused, autoResume bool
	if ok {
		agentAddr = l.rec.AgentAddr
		paused = l.suspending || l.rec.State == store.StatePaused
		autoResume = l.rec.AutoResume
	}
	e.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w (it is not running)", id, errdefs.ErrNotFound)
	}
	if paused {
		if !autoResume {
			return nil, errPaused(id)
		}
		// The request that reaches a paused sandbox wakes it (E2B's
		// autoResume); a pause under way is waited for first.
		sb, err := e.resume(ctx, id, 0, false)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		l, ok = e.live[id]
		e.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("sandbox %q: %w (it is not running)", id, errdefs.ErrNotFound)
		}
		agentAddr = sb.AgentAddr
	}
	conn, err := dialBackend(ctx, l.be, id, agentAddr, port)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[id] != l {
		conn.Close()
		return nil, fmt.Errorf("sandbox %q: %w (it stopped while being dialed)", id, errdefs.ErrNotFound)
	}
	return l.conns.add(conn), nil
}

// dialBackend connects to port inside sandbox id the way of be, its
// backend.
func dialBackend(ctx context.Context, be backend.Backend, id, agentAddr string, port int) (net.Conn, error) {
	if d, ok := be.(backend.Dialer); ok {
		return d.DialSandbox(ctx, id, port)
	}
	host, _, err := net.SplitHostPort(agentAddr)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q has no usable agent address %q: %w", id, agentAddr, errdefs.ErrUnavailable)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
}

// connSet holds the open connections into one sandbox.
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	cut   bool
}

// add tracks conn; once the set is cut, conn is closed at once.
func (s *connSet) add(conn net.Conn) net.Conn {
	t := &trackedConn{Conn: conn, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		conn.Close()
		return t
	}
	if s.conns == nil {
		s.conns = map[*trackedConn]struct{}{}
	}
	s.conns[t] = struct{}{}
	return t
}

// cutAll closes every tracked connection, and every one added later.
func (s *connSet) cutAll() {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.cut = nil, true
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
