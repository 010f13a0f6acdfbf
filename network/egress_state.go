package network

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lightbearco/tupper/netpolicy"
)

// maxDenials is how many recent denials each sandbox keeps.
const maxDenials = 256

// sandboxNet is what the egress layer knows of one sandbox: where it is,
// its compiled policy, its recent denials and the proxied connections
// that a policy update may have to cut. It is safe for concurrent use.
type sandboxNet struct {
	id     string
	hostIf string
	addr   netip.Addr // the sandbox's address
	gw     netip.Addr // the host side of its veth: its resolver and gateway
	log    *slog.Logger

	mu      sync.Mutex
	policy  *netpolicy.Compiled
	denials []netpolicy.Denial // ring, oldest first once full
	next    int
	conns   map[*proxiedConn]struct{}
}

// proxiedConn is a connection the egress proxy carries for a sandbox.
type proxiedConn struct {
	dst  netip.AddrPort
	host string // HTTP Host or TLS SNI, if any
	// close ends both sides at once; it must be safe to call more than
	// once and from any goroutine.
	close func()
}

func newSandboxNet(ep *Endpoint, pol *netpolicy.Compiled, log *slog.Logger) *sandboxNet {
	return &sandboxNet{
		id: ep.ID, hostIf: ep.HostIf, addr: ep.SandboxAddr.Addr(), gw: ep.HostAddr.Addr(),
		log: log.With("sandbox", ep.ID), policy: pol, conns: map[*proxiedConn]struct{}{},
	}
}

// Policy returns the sandbox's compiled policy.
func (s *sandboxNet) Policy() *netpolicy.Compiled {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// setPolicy replaces the policy and cuts the proxied connections that it
// no longer allows. It returns how many it cut.
func (s *sandboxNet) setPolicy(pol *netpolicy.Compiled, forbidden func(netip.Addr) bool) int {
	s.mu.Lock()
	s.policy = pol
	var cut []*proxiedConn
	for c := range s.conns {
		if forbidden(c.dst.Addr()) || !pol.Decide(c.dst.Addr(), c.host).Allowed {
			cut = append(cut, c)
			delete(s.conns, c)
		}
	}
	s.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
	return len(cut)
}

// track registers a proxied connection; the returned function forgets it.
func (s *sandboxNet) track(c *proxiedConn) (untrack func()) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}
}

// closeAll cuts every proxied connection, when the sandbox goes.
func (s *sandboxNet) closeAll() {
	s.mu.Lock()
	conns := slices.Collect(func(yield func(*proxiedConn) bool) {
		for c := range s.conns {
			if !yield(c) {
				return
			}
		}
	})
	clear(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// deny records a denial and logs it.
func (s *sandboxNet) deny(d netpolicy.Denial) {
	if d.Time.IsZero() {
		d.Time = time.Now().UTC()
	}
	s.log.Info("egress denied", "op", "egress", "kind", d.Kind, "protocol", d.Protocol,
		"destination", d.Destination, "host", d.Host, "rule", d.Rule)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.denials) < maxDenials {
		s.denials = append(s.denials, d)
		return
	}
	s.denials[s.next] = d
	s.next = (s.next + 1) % maxDenials
}

// Denials returns the recent denials, oldest first.
func (s *sandboxNet) Denials() []netpolicy.Denial {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.denials) < maxDenials {
		return slices.Clone(s.denials)
	}
	return append(slices.Clone(s.denials[s.next:]), s.denials[:s.next]...)
}

// egressLookup is what the DNS server and the egress proxy ask of the
// egress layer.
type egressLookup interface {
	// sandboxAt returns the sandbox whose address is src.
	sandboxAt(src netip.Addr) (*sandboxNet, bool)
	// forbidden reports whether no sandbox may reach a, whatever its
	// policy: an always-denied range or the host's own networks, less
	// the operator's exemptions.
	forbidden(a netip.Addr) bool
}

// rstClose closes c so that the peer sees a reset rather than an orderly
// end: a refused connection must fail at once, never look half-open.
func rstClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
