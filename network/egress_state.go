package network

import (
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/netpolicy"
)

// maxDenials is how many recent denials each sandbox keeps.
const maxDenials = 256

// Bounds of what a sandbox may hold in the egress layer, so that one
// sandbox cannot use up the daemon's memory or descriptors.
const (
	// maxBindings is how many names a sandbox's resolver remembers the
	// addresses of, and maxAddrsPerName how many addresses of each.
	maxBindings     = 4096
	maxAddrsPerName = 64
	// denialLogBurst and denialLogEvery bound how fast one sandbox's
	// denials reach the daemon's log (all of them reach its own record).
	denialLogBurst = 20
	denialLogEvery = time.Second
	// bindingLife is how long an answer is remembered: longer than any
	// TTL, since programs cache lookups past them.
	bindingLife = time.Hour
	// maxProxiedConns is how many connections the egress proxy carries
	// for one sandbox at once.
	maxProxiedConns = 1024
)

// sandboxNet is what the egress layer knows of one sandbox: where it is,
// its compiled policy, its recent denials and the proxied connections
// that a policy update may have to cut. It is safe for concurrent use.
type sandboxNet struct {
	id     string
	hostIf string
	addr   netip.Addr // the sandbox's address
	gw     netip.Addr // the host side of its veth: its resolver and gateway
	// addr6 and gw6 are the same for IPv6; zero when the sandbox has none.
	addr6, gw6 netip.Addr
	log        *slog.Logger

	mu     sync.Mutex
	policy *netpolicy.Compiled
	// ruleNames name the firewall's rules by the index its log reports.
	ruleNames []string
	denials   []netpolicy.Denial // ring, oldest first once full
	next      int
	conns     map[*proxiedConn]struct{}
	active    int // proxied connections, tracked or not yet
	// bindings maps each name the sandbox looked up (an allowOut domain)
	// to the addresses it was answered, with when they expire.
	bindings map[string]map[netip.Addr]time.Time
	// logTokens and logRefill pace the log lines of denials; suppressed
	// counts those left out since the last line.
	logTokens  int
	logRefill  time.Time
	suppressed int
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
		addr6: ep.SandboxAddr6.Addr(), gw6: ep.HostAddr6.Addr(),
		log: log.With("sandbox", ep.ID), policy: pol, conns: map[*proxiedConn]struct{}{},
		bindings: map[string]map[netip.Addr]time.Time{},
	}
}

// Policy returns the sandbox's compiled policy.
func (s *sandboxNet) Policy() *netpolicy.Compiled {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// hasIPv6 reports whether the sandbox has an IPv6 address.
func (s *sandboxNet) hasIPv6() bool { return s.addr6.IsValid() }

// bind remembers that name resolved to addrs for this sandbox.
func (s *sandboxNet) bind(name string, addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	name = canonicalHost(name)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.bindings[name]; !ok && len(s.bindings) >= maxBindings {
		for n, as := range s.bindings {
			for a, exp := range as {
				if now.After(exp) {
					delete(as, a)
				}
			}
			if len(as) == 0 {
				delete(s.bindings, n)
			}
		}
		if len(s.bindings) >= maxBindings {
			return
		}
	}
	as := s.bindings[name]
	if as == nil {
		as = map[netip.Addr]time.Time{}
		s.bindings[name] = as
	}
	for a, exp := range as {
		if now.After(exp) {
			delete(as, a)
		}
	}
	for _, a := range addrs {
		if _, ok := as[a.Unmap()]; !ok && len(as) >= maxAddrsPerName {
			// A resolver that answers a new address every time must not
			// grow this without end; the oldest answers go first.
			delete(as, oldestBinding(as))
		}
		as[a.Unmap()] = now.Add(bindingLife)
	}
}

// oldestBinding returns the address of as that expires first.
func oldestBinding(as map[netip.Addr]time.Time) netip.Addr {
	var oldest netip.Addr
	var at time.Time
	for a, exp := range as {
		if !oldest.IsValid() || exp.Before(at) {
			oldest, at = a, exp
		}
	}
	return oldest
}

// boundTo reports whether name resolved to a for this sandbox lately.
func (s *sandboxNet) boundTo(name string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.bindings[canonicalHost(name)][a.Unmap()]
	return ok && time.Now().Before(exp)
}

// decide decides a connection to a (with host its HTTP Host or TLS SNI)
// under pol. A domain entry admits the connection only at an address the
// name resolves to: otherwise an allowed name would open any address on
// ports 80 and 443 to a client that dials it by hand. resolve, when not
// nil, looks the name up when the sandbox never did; its answer is
// remembered.
func (s *sandboxNet) decide(pol *netpolicy.Compiled, a netip.Addr, host string, resolve func(string) []netip.Addr) netpolicy.Verdict {
	dv, named := pol.DomainVerdict(host)
	if !named {
		return pol.IPVerdict(a)
	}
	if s.boundTo(host, a) {
		return dv
	}
	if resolve != nil {
		addrs := resolve(canonicalHost(host))
		s.bind(host, addrs)
		if s.boundTo(host, a) {
			return dv
		}
	}
	if iv := pol.IPVerdict(a); iv.Allowed {
		return iv
	}
	return netpolicy.Verdict{Rule: dv.Rule + " allows the name, but it does not resolve to " + a.String()}
}

func canonicalHost(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// acquire counts one more proxied connection, and reports false when the
// sandbox has maxProxiedConns already.
func (s *sandboxNet) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active >= maxProxiedConns {
		return false
	}
	s.active++
	return true
}

// release undoes an acquire.
func (s *sandboxNet) release() {
	s.mu.Lock()
	s.active--
	s.mu.Unlock()
}

// setPolicy replaces the policy and cuts the proxied connections that it
// no longer allows. It returns how many it cut.
func (s *sandboxNet) setPolicy(pol *netpolicy.Compiled, forbidden func(netip.Addr) bool) int {
	s.mu.Lock()
	s.policy = pol
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	// Decided as the proxy decides a new connection (without a fresh
	// lookup: what the sandbox connected to was resolved already).
	cut := 0
	for _, c := range conns {
		if forbidden(c.dst.Addr()) || !s.decide(pol, c.dst.Addr(), c.host, nil).Allowed {
			s.untrack(c)
			c.close()
			cut++
		}
	}
	return cut
}

// track registers a proxied connection; the returned function forgets it.
func (s *sandboxNet) track(c *proxiedConn) (untrack func()) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return func() { s.untrack(c) }
}

func (s *sandboxNet) untrack(c *proxiedConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// closeAll cuts every proxied connection, when the sandbox goes.
func (s *sandboxNet) closeAll() {
	s.mu.Lock()
	conns := slices.Collect(maps.Keys(s.conns))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logAllowed(d.Time) {
		s.log.Info("egress denied", "op", "egress", "kind", d.Kind, "protocol", d.Protocol,
			"destination", d.Destination, "host", d.Host, "rule", d.Rule, "suppressed", s.suppressed)
		s.suppressed = 0
	} else {
		s.suppressed++
	}
	if len(s.denials) < maxDenials {
		s.denials = append(s.denials, d)
		return
	}
	s.denials[s.next] = d
	s.next = (s.next + 1) % maxDenials
}

// logAllowed reports whether a denial at now may be logged: at most
// denialLogBurst at once, refilled one per denialLogEvery. The caller holds
// s.mu.
func (s *sandboxNet) logAllowed(now time.Time) bool {
	if s.logRefill.IsZero() {
		s.logTokens, s.logRefill = denialLogBurst, now
	}
	if n := int(now.Sub(s.logRefill) / denialLogEvery); n > 0 {
		s.logTokens = min(denialLogBurst, s.logTokens+n)
		s.logRefill = s.logRefill.Add(time.Duration(n) * denialLogEvery)
	}
	if s.logTokens == 0 {
		return false
	}
	s.logTokens--
	return true
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
