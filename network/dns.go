package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

const (
	// dnsUpstreamTimeout bounds one exchange with one upstream.
	dnsUpstreamTimeout = 2 * time.Second
	// dnsUpstreamUDPSize is the EDNS0 buffer size offered to upstreams:
	// the DNS flag day 2020 value, large enough that few answers need TCP
	// and small enough not to fragment.
	dnsUpstreamUDPSize = 1232
	// hostResolvConf is where the host's nameservers are read from when
	// dnsConfig.Upstreams is empty.
	hostResolvConf = "/etc/resolv.conf"
)

// dnsConfig configures the sandboxes' resolver.
type dnsConfig struct {
	// Addr is the listen address for both UDP and TCP, e.g. "127.0.0.1:0".
	Addr string
	// Upstreams are the "host:port" resolvers queries are forwarded to, in
	// order of preference; empty means the nameservers of the host's
	// /etc/resolv.conf (port 53).
	Upstreams []string
	// Lookup maps a query's source address to its sandbox. Required.
	Lookup egressLookup
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports what is missing from c.
func (c *dnsConfig) Validate() error {
	if c.Addr == "" {
		return fmt.Errorf("dns: no listen address: %w", errdefs.ErrInvalidArgument)
	}
	if c.Lookup == nil {
		return fmt.Errorf("dns: no sandbox lookup: %w", errdefs.ErrInvalidArgument)
	}
	for _, u := range c.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return fmt.Errorf("dns: upstream %q: %w: %w", u, err, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// dnsServer is the resolver the sandboxes' port-53 traffic is redirected
// to. It answers each sandbox as its policy says: lookups the policy
// forbids are refused at once, the rest are forwarded to the upstreams,
// their answers stripped of AAAA records (sandboxes have no IPv6) and,
// where the policy says so, of the A records it does not allow. It is
// safe for concurrent use.
type dnsServer struct {
	lookup    egressLookup
	upstreams []string
	log       *slog.Logger
	udpClient *dns.Client
	tcpClient *dns.Client
	port      uint16

	udp, tcp *dns.Server
	closeMu  sync.Mutex
	closed   bool
}

// startDNS starts the resolver on cfg.Addr, UDP and TCP on the same port.
// It is listening when it returns.
func startDNS(cfg dnsConfig) (*dnsServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	upstreams := cfg.Upstreams
	if len(upstreams) == 0 {
		// A host without a resolver still gets a sandbox resolver: it
		// refuses what the policy forbids and answers SERVFAIL at once
		// for the rest, so that nothing in a sandbox waits on a lookup.
		rc, err := dns.ClientConfigFromFile(hostResolvConf)
		if err == nil {
			for _, s := range rc.Servers {
				upstreams = append(upstreams, net.JoinHostPort(s, "53"))
			}
		}
		if len(upstreams) == 0 {
			log.Warn("dns: no upstream resolver (none given, and none in the host's resolv.conf): sandbox lookups will fail; pass --dns-upstream", "op", "dns", "err", err)
		}
	}
	d := &dnsServer{
		lookup:    cfg.Lookup,
		upstreams: upstreams,
		log:       log.With("op", "dns"),
		udpClient: &dns.Client{Net: "udp", Timeout: dnsUpstreamTimeout, UDPSize: dnsUpstreamUDPSize},
		tcpClient: &dns.Client{Net: "tcp", Timeout: dnsUpstreamTimeout},
	}
	pc, ln, err := listenSamePort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	d.port = uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	d.udp = &dns.Server{PacketConn: pc, Handler: d}
	d.tcp = &dns.Server{Listener: ln, Handler: d, ReadTimeout: 10 * time.Second}
	// Shutdown fails on a server that has not started, so wait for both:
	// a Close right after startDNS must still stop them.
	var started sync.WaitGroup
	for _, s := range []*dns.Server{d.udp, d.tcp} {
		started.Add(1)
		s.NotifyStartedFunc = started.Done
		go func() {
			if err := s.ActivateAndServe(); err != nil {
				d.log.Error("dns server stopped", "err", err)
			}
		}()
	}
	started.Wait()
	return d, nil
}

// listenSamePort opens a UDP socket and a TCP listener on one port. When
// addr's port is 0 the kernel picks the UDP port, which may be taken for
// TCP; then it tries again.
func listenSamePort(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	tries := 1
	if port == "0" {
		tries = 10
	}
	for i := 0; ; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, err
		}
		p := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if i+1 >= tries {
			return nil, nil, err
		}
	}
}

// Port returns the port the server listens on, for UDP and TCP alike.
func (d *dnsServer) Port() uint16 { return d.port }

// Close stops the server. Queries being forwarded are given a moment to
// finish.
func (d *dnsServer) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*dnsUpstreamTimeout)
	defer cancel()
	return errors.Join(d.udp.ShutdownContext(ctx), d.tcp.ShutdownContext(ctx))
}

// ServeDNS answers one query.
func (d *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	_, isTCP := w.RemoteAddr().(*net.TCPAddr)
	resp := d.answer(r, dnsAddrOf(w.RemoteAddr()))
	size := dns.MaxMsgSize
	if !isTCP {
		size = dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
	}
	resp.Truncate(size)
	if err := w.WriteMsg(resp); err != nil {
		d.log.Debug("dns reply not sent", "err", err)
	}
}

// answer makes the reply to r, a query from src.
func (d *dnsServer) answer(r *dns.Msg, src netip.Addr) *dns.Msg {
	if r.Opcode != dns.OpcodeQuery {
		return dnsReply(r, dns.RcodeNotImplemented)
	}
	if len(r.Question) != 1 {
		return dnsReply(r, dns.RcodeFormatError)
	}
	sb, ok := d.lookup.sandboxAt(src)
	if !ok {
		return dnsReply(r, dns.RcodeRefused)
	}
	q := r.Question[0]
	name := dns.CanonicalName(q.Name)
	if dnsTrimDot(name) == sb.id {
		// The sandbox's own hostname, which /etc/hosts answers; resolver
		// libraries ask for its other record types too. Nothing to
		// forward, nothing refused.
		return dnsReply(r, dns.RcodeSuccess)
	}
	pol := sb.Policy()
	v := pol.NameVerdict(name)
	if !v.Allowed {
		sb.deny(netpolicy.Denial{Kind: "dns", Destination: dnsTrimDot(name), Rule: v.Rule})
		return dnsReply(r, dns.RcodeRefused)
	}
	up := d.forward(r)
	if up == nil {
		return dnsReply(r, dns.RcodeServerFailure)
	}
	m := dnsReply(r, up.Rcode)
	m.RecursionAvailable = up.RecursionAvailable
	m.Answer, m.Ns, m.Extra = up.Answer, up.Ns, dnsWithoutOPT(up.Extra)
	if !sb.hasIPv6() || pol.Inspects() {
		// No IPv6 in the sandbox, or a policy whose domain checks run on
		// IPv4 only: an AAAA answer would only make clients try first
		// what is refused.
		m.Answer, m.Extra = dnsStripAAAA(m.Answer), dnsStripAAAA(m.Extra)
	}
	if _, ok := pol.DomainVerdict(name); ok || len(pol.Transform(name)) > 0 {
		// The egress proxy admits a connection by its Host or SNI, and
		// adds a rule's headers, only at an address the name resolves
		// to: remember this answer's.
		sb.bind(name, dnsAddrs(m.Answer))
	}
	return m
}

// forward asks the upstreams in turn and returns the first answer that is
// not a server failure, or nil when none answers. A truncated UDP answer
// is asked again over TCP.
func (d *dnsServer) forward(r *dns.Msg) *dns.Msg {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.Opcode = dns.OpcodeQuery
	q.RecursionDesired = r.RecursionDesired
	q.CheckingDisabled = r.CheckingDisabled
	q.Question = []dns.Question{r.Question[0]}
	do := false
	if opt := r.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	q.SetEdns0(dnsUpstreamUDPSize, do)
	for _, u := range d.upstreams {
		resp, _, err := d.udpClient.Exchange(q, u)
		if err == nil && resp.Truncated {
			resp, _, err = d.tcpClient.Exchange(q, u)
		}
		if err != nil {
			d.log.Debug("dns upstream failed", "upstream", u, "err", err)
			continue
		}
		if resp.Rcode == dns.RcodeServerFailure {
			continue
		}
		return resp
	}
	return nil
}

// dnsReply returns an empty reply to r with rcode, carrying an OPT record if
// r did.
func dnsReply(r *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(dnsUpstreamUDPSize, opt.Do())
	}
	return m
}

func dnsStripAAAA(rrs []dns.RR) []dns.RR {
	return dnsFilterRRs(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype != dns.TypeAAAA })
}

func dnsWithoutOPT(rrs []dns.RR) []dns.RR {
	return dnsFilterRRs(rrs, func(rr dns.RR) bool { return rr.Header().Rrtype != dns.TypeOPT })
}

func dnsFilterRRs(rrs []dns.RR, keep func(dns.RR) bool) []dns.RR {
	var out []dns.RR
	for _, rr := range rrs {
		if keep(rr) {
			out = append(out, rr)
		}
	}
	return out
}

// dnsAddrs returns the addresses of the A records in rrs.
func dnsAddrs(rrs []dns.RR) []netip.Addr {
	var out []netip.Addr
	for _, rr := range rrs {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// lookupA resolves name through the upstreams and returns its IPv4
// addresses: what the egress proxy asks when a connection names a host
// that the sandbox never looked up here.
func (d *dnsServer) lookupA(name string) []netip.Addr {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.RecursionDesired = true
	up := d.forward(q)
	if up == nil || up.Rcode != dns.RcodeSuccess {
		return nil
	}
	return dnsAddrs(up.Answer)
}

func dnsTrimDot(name string) string {
	if len(name) > 1 && name[len(name)-1] == '.' {
		return name[:len(name)-1]
	}
	return name
}

// addrOf returns the IP of a UDP or TCP address, IPv4-mapped addresses
// unmapped; the zero Addr for anything else.
func dnsAddrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}
