package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"

	"github.com/lightbearco/tupper/netpolicy"
)

// Egress is the Policy that gives sandboxes the internet under their own
// rules (see package netpolicy): NAT through the host, an nftables chain
// per sandbox that refuses what the policy denies with a reset or an ICMP
// error, a DNS server that answers at once and refuses names the policy
// forbids, and a transparent proxy that checks HTTP Host and TLS SNI
// against domain entries and adds the headers of the policy's rules. It
// remembers each sandbox's recent denials.
//
// An Egress is safe for concurrent use. Its servers listen on 127.0.0.1
// until Close; the firewall sends the sandboxes' traffic there.
type Egress struct {
	cfg   EgressConfig
	log   *slog.Logger
	ca    *authority
	dns   *dnsServer
	proxy *egressProxy
	// stopDenials ends the NFLOG listener; nil when the kernel has none.
	stopDenials func()

	baseMu   sync.Mutex
	baseDone bool
	v6Done   bool // IPv6 forwarding is on

	mu   sync.RWMutex
	byID map[string]*sandboxNet
	byIP map[netip.Addr]*sandboxNet
	byIf map[string]*sandboxNet // by host-side interface, for the kernel's log

	forbiddenNets atomic.Pointer[[]netip.Prefix]
}

var (
	_ Policy         = (*Egress)(nil)
	_ PolicyUpdater  = (*Egress)(nil)
	_ DenialReporter = (*Egress)(nil)
	_ egressLookup   = (*Egress)(nil)
)

// NewEgress starts the DNS server and the egress proxy of a new Egress.
func NewEgress(cfg EgressConfig) (_ *Egress, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.IfPrefix == "" {
		cfg.IfPrefix = DefaultIfPrefix
	}
	if len(cfg.Subnets) == 0 {
		cfg.Subnets = []netip.Prefix{DefaultSubnet}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogGroup == 0 {
		cfg.LogGroup = logGroupFor(cfg.Dir)
	}
	e := &Egress{
		cfg: cfg, log: cfg.Logger.With("op", "egress"),
		byID: map[string]*sandboxNet{}, byIP: map[netip.Addr]*sandboxNet{}, byIf: map[string]*sandboxNet{},
	}
	defer func() {
		if retErr != nil {
			e.Close()
		}
	}()
	e.refreshForbidden()
	ca, err := loadOrCreateAuthority(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	e.ca = ca
	if e.dns, err = startDNS(dnsConfig{Addr: "127.0.0.1:0", Upstreams: cfg.DNSUpstreams, Lookup: e, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("egress: dns server: %w", err)
	}
	if e.proxy, err = startProxy(proxyConfig{Addr: "127.0.0.1:0", Lookup: e, CA: ca, RootCAs: cfg.UpstreamRoots, Resolve: e.dns.lookupA, Secrets: cfg.Secrets, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("egress: proxy: %w", err)
	}
	stop, err := listenDenials(context.Background(), cfg.LogGroup, e.kernelDenial)
	if err != nil {
		// Refused flows are still refused; only their log is missing.
		e.log.Warn("egress: refused connections will not be logged", "group", cfg.LogGroup, "err", err)
	} else {
		e.stopDenials = stop
	}
	return e, nil
}

// CACertPEM returns the certificate of the CA with which the egress proxy
// terminates TLS for domains that have rules. Sandboxes must trust it.
func (e *Egress) CACertPEM() []byte { return e.ca.CertPEM() }

// Close stops the servers and cuts the connections they carry. The
// firewall rules stay until each sandbox is torn down.
func (e *Egress) Close() error {
	var errs []error
	if e.stopDenials != nil {
		e.stopDenials()
	}
	if e.proxy != nil {
		errs = append(errs, e.proxy.Close())
	}
	if e.dns != nil {
		errs = append(errs, e.dns.Close())
	}
	return errors.Join(errs...)
}

// Apply implements Policy: it enforces ep.Egress for the sandbox at ep.
// Applying again replaces what an earlier Apply (of this or an earlier
// process) installed.
func (e *Egress) Apply(ctx context.Context, ep *Endpoint) error {
	if err := e.ensureBase(ctx); err != nil {
		return err
	}
	if err := enableEgressSysctls(ep.HostIf); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	if ep.SandboxAddr6.IsValid() {
		if err := e.ensureIPv6(ctx); err != nil {
			return err
		}
		if err := enableEgressSysctls6(ep.HostIf); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	pol := netpolicy.Compile(ep.Egress)
	sb := newSandboxNet(ep, pol, e.log)
	if err := e.install(ctx, sb, pol); err != nil {
		return err
	}
	e.mu.Lock()
	old := e.byID[ep.ID]
	if old != nil {
		delete(e.byIP, old.addr)
		delete(e.byIf, old.hostIf)
	}
	e.byID[ep.ID], e.byIP[sb.addr], e.byIf[sb.hostIf] = sb, sb, sb
	e.mu.Unlock()
	if old != nil {
		old.closeAll()
	}
	return nil
}

// Update implements PolicyUpdater: the rules of ep.Egress replace the
// sandbox's, and open connections that they deny are cut.
func (e *Egress) Update(ctx context.Context, ep *Endpoint) error {
	e.mu.RLock()
	sb := e.byID[ep.ID]
	e.mu.RUnlock()
	if sb == nil {
		return e.Apply(ctx, ep)
	}
	pol := netpolicy.Compile(ep.Egress)
	if err := e.install(ctx, sb, pol); err != nil {
		return err
	}
	if n := sb.setPolicy(pol, e.forbidden); n > 0 {
		e.log.Info("egress: cut connections the new policy denies", "sandbox", ep.ID, "connections", n)
	}
	return nil
}

// Remove implements Policy. It is idempotent.
func (e *Egress) Remove(ctx context.Context, ep *Endpoint) error {
	err := removeSandboxFirewall(ctx, ep.HostIf)
	e.mu.Lock()
	sb := e.byID[ep.ID]
	if sb != nil {
		delete(e.byID, ep.ID)
		delete(e.byIP, sb.addr)
		delete(e.byIf, sb.hostIf)
	}
	e.mu.Unlock()
	if sb != nil {
		sb.closeAll()
	}
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

// Denials implements DenialReporter.
func (e *Egress) Denials(id string) []netpolicy.Denial {
	e.mu.RLock()
	sb := e.byID[id]
	e.mu.RUnlock()
	if sb == nil {
		return nil
	}
	return sb.Denials()
}

// install writes the nftables chains of sb for pol.
func (e *Egress) install(ctx context.Context, sb *sandboxNet, pol *netpolicy.Compiled) error {
	forbidden := e.refreshForbidden()
	names, err := applySandboxFirewall(ctx, &sandboxFirewall{
		HostIf: sb.hostIf, SandboxAddr: sb.addr, HostAddr: sb.gw, SandboxAddr6: sb.addr6, HostAddr6: sb.gw6, Policy: pol,
		Forbidden: forbidden, Exempt: e.cfg.Exempt,
		DNSPort: e.dns.Port(), ProxyPort: e.proxy.Port(), LogGroup: e.cfg.LogGroup,
	})
	if err != nil {
		return fmt.Errorf("egress: sandbox %q: firewall: %w", sb.id, err)
	}
	sb.mu.Lock()
	sb.ruleNames = names
	sb.mu.Unlock()
	return nil
}

// ensureBase installs the base rule set, once.
func (e *Egress) ensureBase(ctx context.Context) error {
	return e.once(&e.baseDone, func() error { return ensureEgressBase(ctx, e.cfg.IfPrefix) })
}

// ensureIPv6 turns IPv6 forwarding on, once, for the first sandbox that
// has IPv6.
func (e *Egress) ensureIPv6(ctx context.Context) error {
	return e.once(&e.v6Done, func() error { return ensureIPv6Forwarding(ctx) })
}

// once runs f unless done says it succeeded before; a failure is tried
// again by the next caller.
func (e *Egress) once(done *bool, f func() error) error {
	e.baseMu.Lock()
	defer e.baseMu.Unlock()
	if *done {
		return nil
	}
	if err := f(); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	*done = true
	return nil
}

// sandboxAt implements egressLookup.
func (e *Egress) sandboxAt(src netip.Addr) (*sandboxNet, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	sb, ok := e.byIP[src.Unmap()]
	return sb, ok
}

// forbidden implements egressLookup.
func (e *Egress) forbidden(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range e.cfg.Exempt {
		if p.Contains(a) {
			return false
		}
	}
	nets := e.forbiddenNets.Load()
	if nets == nil {
		return true
	}
	for _, p := range *nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refreshForbidden recomputes what no sandbox reaches: the always-denied
// ranges, the pools' subnets, and every address of the host with the
// network it is attached to (the host's LAN is not the internet, even
// when its addresses are public). Host addresses change (DHCP), so this
// runs at every install.
func (e *Egress) refreshForbidden() []netip.Prefix {
	nets := netpolicy.AlwaysDenied()
	nets = append(nets, e.cfg.Subnets...)
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := netlink.AddrList(nil, fam)
		if err != nil {
			e.log.Warn("egress: list host addresses", "err", err)
			continue
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || a.IPNet == nil {
				continue
			}
			ip = ip.Unmap()
			bits, _ := a.Mask.Size()
			nets = append(nets, netip.PrefixFrom(ip, ip.BitLen()), netip.PrefixFrom(ip, bits).Masked())
		}
	}
	nets = compactPrefixes(nets)
	e.forbiddenNets.Store(&nets)
	return nets
}

// compactPrefixes sorts nets and drops those another one holds.
func compactPrefixes(nets []netip.Prefix) []netip.Prefix {
	slices.SortFunc(nets, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := nets[:0]
	for _, p := range nets {
		if n := len(out); n > 0 && out[n-1].Addr().BitLen() == p.Addr().BitLen() && out[n-1].Contains(p.Addr()) && out[n-1].Bits() <= p.Bits() {
			continue
		}
		out = append(out, p)
	}
	return out
}

// kernelDenial records a flow the firewall refused.
func (e *Egress) kernelDenial(hostIf string, idx int, proto string, dst netip.AddrPort) {
	e.mu.RLock()
	sb := e.byIf[hostIf]
	e.mu.RUnlock()
	if sb == nil {
		return
	}
	rule := "firewall rule " + fmt.Sprint(idx)
	sb.mu.Lock()
	if idx >= 0 && idx < len(sb.ruleNames) {
		rule = sb.ruleNames[idx]
	}
	sb.mu.Unlock()
	sb.deny(netpolicy.Denial{Kind: "connect", Protocol: strings.ToLower(proto), Destination: dst.String(), Rule: rule})
}

// HostHasIPv6Route reports whether the host has an IPv6 default route
// through an interface that is not a sandbox's: whether sandboxes can be
// given IPv6 egress.
func HostHasIPv6Route() bool {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Dst: nil}, 0)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue // not a default route
			}
		}
		link, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil || strings.HasPrefix(link.Attrs().Name, DefaultIfPrefix) || link.Attrs().Name == "lo" {
			continue
		}
		return true
	}
	return false
}
