package main

import (
	"net"
	"sync"
)

// defaultInsideConns bounds the connections to the agent that come from
// inside the sandbox (see limitInside).
const defaultInsideConns = 256

// limitInside caps at most the connections ln accepts from inside the
// sandbox at once: from loopback or one of the addresses the sandbox had
// when the agent started. Past the cap such a connection is closed at
// once. The daemon dials from the host's side of the sandbox's link, so a
// process in the sandbox (its unprivileged user) can no longer hold
// connections until the agent runs out of descriptors and every command
// fails. max ≤ 0 means no cap: on WSL the host's own connections arrive
// over loopback.
func limitInside(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	own := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				own[n.IP.String()] = true
			}
		}
	}
	return &insideLimit{Listener: ln, max: max, own: own}
}

type insideLimit struct {
	net.Listener
	max int
	own map[string]bool // addresses of the sandbox's interfaces at start

	mu sync.Mutex
	n  int // inside connections open
}

func (l *insideLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.inside(c.RemoteAddr()) {
			return c, nil
		}
		l.mu.Lock()
		if l.n >= l.max {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.n++
		l.mu.Unlock()
		return &insideConn{Conn: c, l: l}, nil
	}
}

func (l *insideLimit) inside(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	return t.IP.IsLoopback() || l.own[t.IP.String()]
}

// insideConn gives its place back when closed, once.
type insideConn struct {
	net.Conn
	l    *insideLimit
	once sync.Once
}

func (c *insideConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.n--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
