package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/netpolicy"
)

// Pool makes and removes sandbox network endpoints. It is safe for
// concurrent use; callers must not Setup and Teardown the same id at once.
type Pool struct {
	cfg      Config
	log      *slog.Logger
	netnsDir string
	leaseDir string

	fwMu   sync.Mutex
	fwDone bool // the firewall rules are in place

	// claiming holds a token while a Setup of this pool claims an
	// address (see claim).
	claiming chan struct{}
}

// New makes a Pool from cfg, creating its directories. It needs root (more
// precisely CAP_NET_ADMIN and CAP_SYS_ADMIN) only once endpoints are made.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Dir = filepath.Clean(cfg.Dir)
	p := &Pool{
		cfg:      cfg,
		log:      cfg.Logger,
		netnsDir: filepath.Join(cfg.Dir, "netns"),
		leaseDir: filepath.Join(cfg.Dir, "leases"),
		claiming: make(chan struct{}, 1),
	}
	for _, d := range []string{p.netnsDir, p.leaseDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("network pool: %w", err)
		}
	}
	p.reapply()
	return p, nil
}

// reapply applies the Policy again to every endpoint whose lease and
// interface survived an earlier process, so that a restarted daemon
// enforces their policies (and serves their lookups) again. Failures are
// logged: the sandbox then reaches nothing until its policy is updated,
// which fails closed.
func (p *Pool) reapply() {
	if p.cfg.Policy == nil {
		return
	}
	eps, err := p.leases()
	if err != nil {
		p.log.Warn("network: read leases", "err", err)
		return
	}
	for _, ep := range eps {
		if _, err := netlink.LinkByName(ep.HostIf); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.cfg.Policy.Apply(ctx, ep); err != nil {
			// Fail closed: the old process's rules would send the
			// sandbox's lookups and web traffic to ports nobody of ours
			// holds now. Without them the sandbox reaches nothing.
			p.log.Warn("network: apply policy again failed; the sandbox has no network until its policy is updated", "sandbox", ep.ID, "err", err)
			if rerr := p.cfg.Policy.Remove(ctx, ep); rerr != nil {
				p.log.Warn("network: remove the rules of the old process", "sandbox", ep.ID, "err", rerr)
			}
		}
		cancel()
	}
}

// UpdatePolicy replaces the egress policy of sandbox id, in its lease and
// in force. It fails with errdefs.ErrNotFound for an id the pool has no
// lease of, and errdefs.ErrNotSupported when the pool's Policy cannot
// update (or there is none: the sandbox has no egress to change).
func (p *Pool) UpdatePolicy(ctx context.Context, id string, pol *netpolicy.Policy) error {
	up, ok := p.cfg.Policy.(PolicyUpdater)
	if !ok {
		return fmt.Errorf("sandbox %q: network: this pool cannot change egress policies: %w", id, errdefs.ErrNotSupported)
	}
	ep, err := p.Lookup(id)
	if err != nil {
		return err
	}
	old := ep.Egress
	ep.Egress = pol.Clone()
	if err := p.writeLease(ep); err != nil {
		return fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	if err := up.Update(ctx, ep); err != nil {
		// The lease must say what is in force, or a restart would
		// enforce a policy the caller was told had failed.
		ep.Egress = old
		if lerr := p.writeLease(ep); lerr != nil {
			err = errors.Join(err, fmt.Errorf("restore the lease: %w", lerr))
		}
		return fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	return nil
}

// Denials returns the recent connections and lookups of sandbox id that
// its policy refused, oldest first; none when the Policy keeps no record.
func (p *Pool) Denials(id string) []netpolicy.Denial {
	if r, ok := p.cfg.Policy.(DenialReporter); ok {
		return r.Denials(id)
	}
	return nil
}

// Subnet returns the subnet the pool hands out /30s from.
func (p *Pool) Subnet() netip.Prefix { return p.cfg.Subnet }

// NetNSPath returns where the namespace of sandbox id is (or would be)
// bind-mounted.
func (p *Pool) NetNSPath(id string) string { return filepath.Join(p.netnsDir, id) }

func (p *Pool) leasePath(id string) string { return filepath.Join(p.leaseDir, id) }

func (p *Pool) hostIf(id string) string { return HostIfName(p.cfg.IfPrefix, p.cfg.Dir, id) }

// Setup makes the network of sandbox id, with egress policy pol, and
// returns it. It fails with
// errdefs.ErrAlreadyExists when the pool holds anything for id, and with
// errdefs.ErrResourceExhausted when no /30 is free. A failed Setup leaves
// nothing behind. ctx bounds the call only.
func (p *Pool) Setup(ctx context.Context, id string, pol *netpolicy.Policy) (_ *Endpoint, retErr error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	begin := time.Now()
	log := p.log.With("sandbox", id, "op", "network-setup")
	ep := &Endpoint{ID: id, NetNSPath: p.NetNSPath(id), HostIf: p.hostIf(id), Egress: pol.Clone()}

	var undo cleanup.Stack
	defer func() {
		if retErr != nil {
			if err := undo.Run(); err != nil {
				log.Warn("network setup: cleanup failed", "err", err)
			}
		}
	}()

	if err := p.ensureFirewall(ctx); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	if err := p.ensureUnreachable(); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	for _, path := range []string{p.leasePath(id), ep.NetNSPath} {
		if _, err := os.Lstat(path); err == nil {
			return nil, fmt.Errorf("sandbox %q: network: %s exists: %w", id, path, errdefs.ErrAlreadyExists)
		}
	}

	// The namespace and the veth pair are made before any lock is taken:
	// their names are the sandbox's own, and only the address needs the
	// host-wide pick (claim).
	v6 := p.cfg.IPv6Subnet.IsValid()
	if err := createNetNS(ep.NetNSPath, v6); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	undo.Add(func() error { return removeNetNS(ep.NetNSPath) })

	ns, err := netns.GetFromPath(ep.NetNSPath)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: network: open netns: %w", id, err)
	}
	defer ns.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: ep.HostIf},
		PeerName:      SandboxIfName,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox %q: network: add veth %s: %w", id, ep.HostIf, err)
	}
	undo.Add(func() error { return deleteLink(ep.HostIf) })

	link, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: network: host side %s: %w", id, ep.HostIf, err)
	}
	if err := p.prepareHostSide(link, id, v6); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: host side %s: %w", id, ep.HostIf, err)
	}
	if err := p.claim(ctx, ep, link, &undo); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: %w", id, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: host side %s up: %w", id, ep.HostIf, err)
	}
	if err := configureSandboxSide(ns, ep); err != nil {
		return nil, fmt.Errorf("sandbox %q: network: namespace side: %w", id, err)
	}
	if p.cfg.Policy != nil {
		undo.Add(func() error { return p.cfg.Policy.Remove(context.WithoutCancel(ctx), ep) })
		if err := p.cfg.Policy.Apply(ctx, ep); err != nil {
			return nil, fmt.Errorf("sandbox %q: network: policy: %w", id, err)
		}
	}
	undo.Release()
	log.Debug("network ready", "hostIf", ep.HostIf, "addr", ep.SandboxAddr, "took", time.Since(begin))
	return ep, nil
}

// claim picks a free /30 for ep and takes it host-wide: the lease is
// written and the host side of the veth, link, carries the address, all
// under the lock of the /30's block, which is held for nothing else. It
// tries the pool's home block first and the others in turn, and fails with
// errdefs.ErrResourceExhausted when every block is full.
func (p *Pool) claim(ctx context.Context, ep *Endpoint, link netlink.Link, undo *cleanup.Stack) error {
	// One claim of this pool at a time: its concurrent Setups queue here,
	// in order, rather than all polling the lock file.
	select {
	case p.claiming <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for an address: %w", context.Cause(ctx))
	}
	defer func() { <-p.claiming }()
	nb := blocks(p.cfg.Subnet)
	home := homeBlock(p.cfg.Subnet, p.cfg.Dir)
	for i := range nb {
		ok, err := p.claimIn(ctx, (home+i)%nb, ep, link, undo)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("no free /30 in %s: %w", p.cfg.Subnet, errdefs.ErrResourceExhausted)
}

// claimIn claims a /30 of block b for ep, and reports false when the block
// has none free.
func (p *Pool) claimIn(ctx context.Context, b int, ep *Endpoint, link netlink.Link, undo *cleanup.Stack) (bool, error) {
	unlock, err := lockFile(ctx, blockLockPath(p.cfg.LockPath, b))
	if err != nil {
		return false, err
	}
	defer unlock()
	n, ok, err := p.freeSlot(b)
	if err != nil || !ok {
		return false, err
	}
	ep.HostAddr, ep.SandboxAddr, _ = slot(p.cfg.Subnet, n)
	if p.cfg.IPv6Subnet.IsValid() {
		ep.HostAddr6, ep.SandboxAddr6 = slot6(p.cfg.IPv6Subnet, n)
	}
	if err := p.writeLease(ep); err != nil {
		return false, err
	}
	undo.Add(func() error { return removeIfExists(p.leasePath(ep.ID)) })
	// Once the host side carries the address, every pool of the subnet
	// sees the /30 as taken, and the lock can go.
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(ep.HostAddr)}); err != nil {
		return false, fmt.Errorf("address %s on %s: %w", ep.HostAddr, ep.HostIf, err)
	}
	if ep.HostAddr6.IsValid() {
		// No duplicate address detection: the /126 is ours, and DAD
		// would hold the address back for a second or more.
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(ep.HostAddr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return false, fmt.Errorf("address %s on %s: %w", ep.HostAddr6, ep.HostIf, err)
		}
	}
	return true, nil
}

// freeSlot returns a /30 of block b that no lease of this pool names and no
// host interface has an address in, and false when there is none. The
// caller holds the block's lock.
func (p *Pool) freeSlot(b int) (int, bool, error) {
	taken := map[int]bool{}
	leases, err := p.leases()
	if err != nil {
		return 0, false, err
	}
	for _, ep := range leases {
		if n, ok := slotOf(p.cfg.Subnet, ep.SandboxAddr.Addr()); ok {
			taken[n] = true
		}
	}
	addrs, err := listAddrs()
	if err != nil {
		return 0, false, err
	}
	for _, a := range addrs {
		if n, ok := slotOf(p.cfg.Subnet, a); ok {
			taken[n] = true
		}
	}
	// Start the search at a random slot rather than the lowest: an
	// address freed a moment ago is then almost never handed out again at
	// once, so a client still holding a dead sandbox's address does not
	// find a new sandbox there.
	first, total := blockRange(p.cfg.Subnet, b)
	start := rand.IntN(total)
	for i := range total {
		if n := first + (start+i)%total; !taken[n] {
			return n, true, nil
		}
	}
	return 0, false, nil
}

// listAddrs returns every IPv4 address on the host's interfaces.
func listAddrs() ([]netip.Addr, error) {
	var list []netlink.Addr
	var err error
	for range 5 {
		list, err = netlink.AddrList(nil, netlink.FAMILY_V4)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(list))
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// prepareHostSide names and locks down link, the host side of sandbox id's
// veth, before it has an address: the kernel must never route the
// sandbox's packets anywhere but to the host itself (forwarding; a Policy
// opens it), must drop packets whose source is not the sandbox's /30
// (rp_filter), and, unless the sandbox has IPv6 (v6), must not offer IPv6
// paths that no policy would see.
func (p *Pool) prepareHostSide(link netlink.Link, id string, v6 bool) error {
	name := link.Attrs().Name
	if err := netlink.LinkSetAlias(link, ifAlias(p.cfg.Dir, id)); err != nil {
		return fmt.Errorf("alias: %w", err)
	}
	disable6 := "1"
	if v6 {
		disable6 = "0"
	}
	for _, s := range []struct{ path, value string }{
		{"/proc/sys/net/ipv6/conf/" + name + "/accept_ra", "0"},
		{"/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6", disable6},
		{"/proc/sys/net/ipv4/conf/" + name + "/forwarding", "0"},
		{"/proc/sys/net/ipv4/conf/" + name + "/rp_filter", "1"},
	} {
		err := os.WriteFile(s.path, []byte(s.value), 0o644)
		if err != nil && !(errors.Is(err, fs.ErrNotExist) && strings.Contains(s.path, "/ipv6/")) {
			return fmt.Errorf("sysctl: %w", err)
		}
	}
	return nil
}

// configureSandboxSide raises lo and eth0 in ns, gives eth0 its address and
// routes everything through the host side.
func configureSandboxSide(ns netns.NsHandle, ep *Endpoint) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	eth, err := h.LinkByName(SandboxIfName)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(ep.SandboxAddr)}); err != nil {
		return fmt.Errorf("address %s: %w", ep.SandboxAddr, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("%s up: %w", SandboxIfName, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(ep.HostAddr.Addr().AsSlice())}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	if ep.SandboxAddr6.IsValid() {
		if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(ep.SandboxAddr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return fmt.Errorf("address %s: %w", ep.SandboxAddr6, err)
		}
		route6 := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(ep.HostAddr6.Addr().AsSlice()),
			Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
		if err := h.RouteAdd(route6); err != nil {
			return fmt.Errorf("default IPv6 route: %w", err)
		}
	}
	return nil
}

// Teardown removes everything the pool made for sandbox id: the policy, the
// veth pair, the namespace bind mount and the lease. It is idempotent and
// goes on past errors, returning them joined.
func (p *Pool) Teardown(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	ep, err := p.Lookup(id)
	if err != nil {
		// The lease is lost; the names alone are enough to clean up.
		ep = &Endpoint{ID: id, NetNSPath: p.NetNSPath(id), HostIf: p.hostIf(id)}
	}
	var errs []error
	if p.cfg.Policy != nil {
		if err := p.cfg.Policy.Remove(ctx, ep); err != nil {
			errs = append(errs, fmt.Errorf("policy: %w", err))
		}
	}
	// The veth goes first so that its /30 stays leased until no interface
	// carries it.
	if err := deleteLink(ep.HostIf); err != nil {
		errs = append(errs, err)
	}
	if err := removeNetNS(ep.NetNSPath); err != nil {
		errs = append(errs, err)
	}
	if err := removeIfExists(p.leasePath(id)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox %q: network teardown: %w", id, err)
	}
	p.log.Debug("network removed", "sandbox", id, "op", "network-teardown")
	return nil
}

// Lookup returns the endpoint leased to sandbox id, or an
// errdefs.ErrNotFound error.
func (p *Pool) Lookup(id string) (*Endpoint, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p.leasePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %q: network lease: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: network lease: %w", id, err)
	}
	var ep Endpoint
	if err := json.Unmarshal(b, &ep); err != nil {
		return nil, fmt.Errorf("sandbox %q: network lease: %w", id, err)
	}
	return &ep, nil
}

// List returns the sorted ids for which the pool holds anything: a lease, a
// namespace bind mount, or a host interface, whether their sandbox runs or
// was left behind by a crash. Teardown removes them.
func (p *Pool) List(ctx context.Context) ([]string, error) {
	ids := map[string]bool{}
	for _, dir := range []string{p.leaseDir, p.netnsDir} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("network: %w", err)
		}
		for _, e := range entries {
			if ValidateID(e.Name()) == nil {
				ids[e.Name()] = true
			}
		}
	}
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("network: list links: %w", err)
	}
	for _, l := range links {
		a := l.Attrs()
		if !strings.HasPrefix(a.Name, p.cfg.IfPrefix) {
			continue
		}
		if id, ok := parseIfAlias(a.Alias, p.cfg.Dir); ok {
			ids[id] = true
		}
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// leases returns the endpoints of every lease file.
func (p *Pool) leases() ([]*Endpoint, error) {
	entries, err := os.ReadDir(p.leaseDir)
	if err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	var out []*Endpoint
	for _, e := range entries {
		if ValidateID(e.Name()) != nil {
			continue
		}
		ep, err := p.Lookup(e.Name())
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			return nil, err
		}
		out = append(out, ep)
	}
	return out, nil
}

// writeLease records ep atomically: a reader sees the whole lease or none.
func (p *Pool) writeLease(ep *Endpoint) error {
	b, err := json.Marshal(ep)
	if err != nil {
		return err
	}
	tmp := p.leasePath(ep.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	if err := os.Rename(tmp, p.leasePath(ep.ID)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// deleteLink deletes the interface name, and with it its veth peer. A
// missing interface is fine.
func deleteLink(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}
}

// ensureUnreachable installs an "unreachable" route for the whole subnet in
// the host's namespace. Each live sandbox's /30 is a more specific route and
// wins; a packet for a sandbox that is gone (a stale client, a reused
// connection) then fails at once with EHOSTUNREACH instead of leaving the
// host through its default route towards a private address nobody here owns.
func (p *Pool) ensureUnreachable() error {
	r := &netlink.Route{Dst: prefixIPNet(p.cfg.Subnet), Type: unix.RTN_UNREACHABLE}
	if err := netlink.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("unreachable route for %s: %w", p.cfg.Subnet, err)
	}
	return nil
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
