package testutil

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The fake internet's addresses. They are documentation ranges (RFC 5737,
// RFC 3849), which no real host uses and which the egress policy does not
// deny outright, so a test can open and close them with a policy.
var (
	fakeHostA  = netip.MustParseAddr("198.51.100.10")
	fakeHostA6 = netip.MustParseAddr("2001:db8::10")
	fakeHostB  = netip.MustParseAddr("203.0.113.10")
	fakeDNS    = netip.MustParseAddr("198.51.100.53")
	// fakeLinkNets is where the /30 between the host and the fixture's
	// namespace is carved from; it stays clear of fakeHostB.
	fakeLinkNets = netip.MustParsePrefix("203.0.113.128/25")
	// fakeLinkNets6 is where the link's /126 is carved from, among its
	// first fakeLinkBlocks6; it stays clear of fakeHostA6.
	fakeLinkNets6 = netip.MustParsePrefix("2001:db8:ffff::/64")
)

const fakeLinkBlocks6 = 1 << 16

// FakeDNSTTL is the TTL, in seconds, of every answer the fake DNS server
// gives, negative ones included (the SOA minimum). It is short so that a
// name changed with Resolve is seen again soon through a caching resolver.
const FakeDNSTTL = 5

const (
	fakeLockPath = "/run/tupper/fakenet.lock"
	fakeNSPrefix = "tupper-fakenet-"
	fakeIfPrefix = "tupfn" // host side veths; at most 15 bytes in all
	fakeNSIf     = "eth0"
	fakeSlowFor  = 30 * time.Second
	fakeSlowTick = 100 * time.Millisecond
)

// fakeDefaultRecords are the names the DNS server answers for at start.
var fakeDefaultRecords = map[string]netip.Addr{
	"api.allowed.test":     fakeHostA,
	"other.test":           fakeHostA,
	"www.allowed.test":     fakeHostA,
	"sub.api.allowed.test": fakeHostA,
	"b.test":               fakeHostB,
}

// fakeCertNames are the DNS names of the servers' certificate. A TLS client
// that asks for any other name by SNI gets a certificate made for it by the
// same CA.
var fakeCertNames = []string{
	"*.test", "allowed.test", "api.allowed.test", "other.test",
	"*.allowed.test", "*.api.allowed.test",
}

var fakeCount atomic.Int64

// FakeInternet is a network namespace routed from the host that plays the
// internet for a test: web servers at documentation addresses and a DNS
// server that names them. Its servers run in the test process.
//
// Only one FakeInternet exists on a host at a time: its addresses are
// fixed, so StartFakeInternet holds a host-wide lock (fakeLockPath) for the
// fixture's life and a second one, from this process or another, waits for
// the first one's cleanup. A test must therefore not start two at once.
//
// Traffic reaches it through host routes (/32 for each IPv4 address, /128
// for HostA6) over a veth pair that carries both families, so the host and
// anything the host forwards for (sandboxes) can reach it; replies go back
// along the namespace's default routes to the host. Nothing the fixture
// sets up sends packets anywhere but over that pair.
// Its methods are safe for concurrent use.
type FakeInternet struct {
	// NS is the path of the namespace's bind mount, under /run/netns; its
	// base name works with `ip netns exec`.
	NS string
	// DNS is the DNS server, on UDP and TCP.
	DNS netip.AddrPort
	// HostA (198.51.100.10) serves HTTP on :80, HTTPS on :443 and a TCP
	// echo on :7000.
	HostA netip.Addr
	// HostA6 (2001:db8::10) is HostA over IPv6: the same servers, and the
	// DNS server's AAAA answer for each name whose A record is HostA.
	HostA6 netip.Addr
	// HostB (203.0.113.10) serves the same.
	HostB netip.Addr
	// CA trusts the HTTPS servers' certificates; CAPEM is the same CA
	// certificate in PEM.
	CA    *x509.CertPool
	CAPEM []byte

	name      string
	hostIf    string
	hostSide  netip.Prefix // the host's address on the link, e.g. 203.0.113.249/30
	nsSide    netip.Prefix // the namespace's address on the link
	hostSide6 netip.Prefix // the same over IPv6, e.g. 2001:db8:ffff::1/126
	nsSide6   netip.Prefix

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	leaf   *tls.Certificate

	done chan struct{} // closed when the fixture is cleaned up
	wg   sync.WaitGroup

	mu       sync.Mutex
	requests []FakeRequest
	records  map[string]netip.Addr // lower-case FQDN → address
	minted   map[string]*tls.Certificate
	echo     map[net.Conn]struct{}
}

// FakeRequest is one HTTP or HTTPS request a FakeInternet server saw.
type FakeRequest struct {
	// Server is the address and port the request came in on.
	Server netip.AddrPort
	// Host is the Host header; SNI the TLS server name, empty over HTTP.
	Host, SNI string
	Path      string
	// Header holds all request headers as the server got them (Go keeps
	// Host apart, in Host).
	Header http.Header
	Time   time.Time
}

// StartFakeInternet builds a FakeInternet and removes it, with all its
// routes, links and servers, when t ends, failed or not. It skips t unless
// it runs as root on Linux.
func StartFakeInternet(t testing.TB) *FakeInternet {
	t.Helper()
	if runtime.GOOS != "linux" {
		Skip(t, "the fake internet needs Linux network namespaces")
	}
	RequiresRoot(t)

	unlock, err := lockFakeNet(t)
	if err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	t.Cleanup(unlock)
	// Holding the lock, no other fixture lives: whatever one left behind
	// (its process was killed) is stale.
	if err := removeStaleFakeNets(); err != nil {
		t.Fatalf("fake internet: remove leftovers: %v", err)
	}

	n := fakeCount.Add(1)
	f := &FakeInternet{
		name:    fmt.Sprintf("%s%d-%d", fakeNSPrefix, os.Getpid(), n),
		hostIf:  fmt.Sprintf("%s%x-%x", fakeIfPrefix, os.Getpid(), n),
		DNS:     netip.AddrPortFrom(fakeDNS, 53),
		HostA:   fakeHostA,
		HostA6:  fakeHostA6,
		HostB:   fakeHostB,
		done:    make(chan struct{}),
		records: make(map[string]netip.Addr),
		minted:  make(map[string]*tls.Certificate),
		echo:    make(map[net.Conn]struct{}),
	}
	f.NS = filepath.Join("/run/netns", f.name)
	if len(f.hostIf) > 15 {
		f.hostIf = f.hostIf[:15]
	}
	for name, addr := range fakeDefaultRecords {
		f.Resolve(name, addr)
	}
	if err := f.makeCA(); err != nil {
		t.Fatalf("fake internet: %v", err)
	}

	ns, err := f.createNS(t)
	if err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	if err := f.link(t, ns); err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	if err := f.serve(t, ns); err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	return f
}

// Requests returns a copy of the HTTP and HTTPS requests seen so far,
// oldest first.
func (f *FakeInternet) Requests() []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FakeRequest, len(f.requests))
	for i, r := range f.requests {
		r.Header = r.Header.Clone()
		out[i] = r
	}
	return out
}

// Resolve makes the DNS server answer name with addr from now on, in place
// of what it answered before: an A record for an IPv4 addr, AAAA for IPv6.
// A name resolved to HostA also has HostA6 as its AAAA record.
func (f *FakeInternet) Resolve(name string, addr netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records[dns.CanonicalName(name)] = addr.Unmap()
}

// lockFakeNet takes the host-wide fixture lock, waiting for the fixture
// that holds it, and returns its release.
func lockFakeNet(t testing.TB) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(fakeLockPath), 0o755); err != nil {
		return nil, err
	}
	fd, err := os.OpenFile(fakeLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	// Wait as long as the test may run: a fixture of another package's
	// test process may hold the lock for a whole end-to-end test.
	deadline := time.Now().Add(5 * time.Minute)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			deadline = dl.Add(-10 * time.Second)
		}
	}
	logged := false
	for {
		err := unix.Flock(int(fd.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			fd.Close()
			return nil, fmt.Errorf("lock %s: %w", fakeLockPath, err)
		}
		holder, _ := os.ReadFile(fakeLockPath)
		if time.Now().After(deadline) {
			fd.Close()
			return nil, fmt.Errorf("lock %s: still held by pid %s (this is pid %d: a test that starts two fixtures at once waits for itself)",
				fakeLockPath, bytes.TrimSpace(holder), os.Getpid())
		}
		if !logged {
			t.Logf("fake internet: waiting for %s, held by pid %s", fakeLockPath, bytes.TrimSpace(holder))
			logged = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	fd.Truncate(0)
	fd.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { fd.Close() }, nil
}

// removeStaleFakeNets removes the namespaces and host links of fixtures
// whose process died before cleaning up. The caller holds the lock.
func removeStaleFakeNets() error {
	var errs []error
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, fakeIfPrefix) && l.Type() == "veth" {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("link %s: %w", l.Attrs().Name, err))
			}
		}
	}
	names, _ := filepath.Glob(filepath.Join("/run/netns", fakeNSPrefix+"*"))
	for _, p := range names {
		if err := netns.DeleteNamed(filepath.Base(p)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("netns %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// createNS makes the fixture's named namespace and returns a handle to it,
// closed at cleanup.
func (f *FakeInternet) createNS(t testing.TB) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan result, 1)
	go func() {
		// The thread is left in the new namespace and never unlocked, so
		// the runtime ends it with the goroutine.
		runtime.LockOSThread()
		ns, err := netns.NewNamed(f.name)
		c <- result{ns, err}
	}()
	r := <-c
	if r.err != nil {
		os.Remove(f.NS) // NewNamed leaves it behind when the mount fails
		return 0, fmt.Errorf("netns %s: %w", f.name, r.err)
	}
	t.Cleanup(func() {
		r.ns.Close()
		if err := netns.DeleteNamed(f.name); err != nil {
			t.Errorf("fake internet: remove netns %s: %v", f.name, err)
		}
	})
	return r.ns, nil
}

// link joins the namespace to the host: a veth pair over a /30 and a
// /126, the service addresses on lo inside, default routes back to the
// host, and host routes to each service address.
func (f *FakeInternet) link(t testing.TB, ns netns.NsHandle) error {
	if err := f.pickLinkNets(); err != nil {
		return err
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: f.hostIf},
		PeerName:      fakeNSIf,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", f.hostIf, err)
	}
	t.Cleanup(func() {
		l, err := netlink.LinkByName(f.hostIf)
		if err == nil {
			err = netlink.LinkDel(l)
		}
		if err != nil {
			t.Errorf("fake internet: remove veth %s: %v", f.hostIf, err)
		}
	})

	if err := f.configureNS(ns); err != nil {
		return err
	}

	host, err := netlink.LinkByName(f.hostIf)
	if err != nil {
		return fmt.Errorf("veth %s: %w", f.hostIf, err)
	}
	if err := enableIPv6(f.hostIf); err != nil {
		return fmt.Errorf("veth %s: %w", f.hostIf, err)
	}
	for _, a := range []*netlink.Addr{
		{IPNet: prefixNet(f.hostSide)},
		// Without duplicate address detection the address is usable
		// at once, not tentative for a second or two.
		{IPNet: prefixNet(f.hostSide6), Flags: unix.IFA_F_NODAD},
	} {
		if err := netlink.AddrAdd(host, a); err != nil {
			return fmt.Errorf("veth %s: address %s: %w", f.hostIf, a.IPNet, err)
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("veth %s: up: %w", f.hostIf, err)
	}
	for _, a := range []netip.Addr{fakeHostA, fakeHostB, fakeDNS, fakeHostA6} {
		gw := f.nsSide.Addr()
		if a.Is6() {
			gw = f.nsSide6.Addr()
		}
		r := &netlink.Route{
			LinkIndex: host.Attrs().Index,
			Dst:       prefixNet(netip.PrefixFrom(a, a.BitLen())),
			Gw:        gw.AsSlice(),
		}
		if err := netlink.RouteAdd(r); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("route %s: the host already has one, not made by this fixture: %w", a, err)
			}
			return fmt.Errorf("route %s: %w", a, err)
		}
		// The route goes with the veth; deleting it first keeps the
		// order of teardown the reverse of set-up.
		t.Cleanup(func() {
			if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
				t.Errorf("fake internet: remove route %s: %v", a, err)
			}
		})
	}
	return nil
}

// pickLinkNets chooses the link's /30 from fakeLinkNets and its /126 from
// fakeLinkNets6, each the first that no host address or route overlaps,
// from a place that depends on the process and call. The host side gets
// the first address of each, the namespace the second.
func (f *FakeInternet) pickLinkNets() error {
	v4, err := freeLinkNet(unix.AF_INET, fakeLinkNets, 30, 1<<(32-fakeLinkNets.Bits()-2))
	if err != nil {
		return err
	}
	v6, err := freeLinkNet(unix.AF_INET6, fakeLinkNets6, 126, fakeLinkBlocks6)
	if err != nil {
		return err
	}
	f.hostSide = netip.PrefixFrom(v4.Addr().Next(), 30)
	f.nsSide = netip.PrefixFrom(v4.Addr().Next().Next(), 30)
	f.hostSide6 = netip.PrefixFrom(v6.Addr().Next(), 126)
	f.nsSide6 = netip.PrefixFrom(v6.Addr().Next().Next(), 126)
	return nil
}

// freeLinkNet returns the first of the first blocks /bits subnets of
// within, counted from a start that depends on the process and call, that
// no host address or route of family overlaps.
func freeLinkNet(family int, within netip.Prefix, bits, blocks int) (netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, family)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list addresses: %w", err)
	}
	routes, err := netlink.RouteList(nil, family)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list routes: %w", err)
	}
	var used []netip.Prefix
	for _, a := range addrs {
		if p, ok := netPrefix(a.IPNet); ok {
			used = append(used, p.Masked())
		}
	}
	for _, r := range routes {
		if p, ok := netPrefix(r.Dst); ok && p.Bits() > 0 {
			used = append(used, p.Masked())
		}
	}
	size := uint64(1) << (within.Addr().BitLen() - bits) // addresses in a block
	start := (os.Getpid() + int(fakeCount.Load())) % blocks
	for i := range blocks {
		n := uint64((start + i) % blocks)
		p := netip.PrefixFrom(addAddr(within.Masked().Addr(), n*size), bits)
		free := true
		for _, u := range used {
			if u.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /%d in %s for the link", bits, within)
}

// addAddr returns a plus n, carrying into at most the low 64 bits.
func addAddr(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + n
	binary.BigEndian.PutUint64(b[8:], lo)
	r := netip.AddrFrom16(b)
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

// enableIPv6 turns IPv6 on for the interface named ifname in the calling
// thread's network namespace: /proc/sys/net is that of the thread that
// opens it.
func enableIPv6(ifname string) error {
	p := filepath.Join("/proc/sys/net/ipv6/conf", ifname, "disable_ipv6")
	if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
		return fmt.Errorf("enable IPv6: %w", err)
	}
	return nil
}

// configureNS sets up the inside of the namespace through a netlink
// handle bound to it. The service addresses go on lo, not on a dummy
// interface: kernels built without the dummy driver (this project's
// machines among them) refuse to make one, and an address on lo is as
// local to the namespace as one on any other interface.
func (f *FakeInternet) configureNS(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netns %s: %w", f.name, err)
	}
	defer h.Close()
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("netns %s: %s: %w", f.name, what, err)
		}
		return nil
	}
	// Before lo comes up, so that it gets ::1 as it does.
	err = inNetNS(ns, func() error {
		return errors.Join(enableIPv6("lo"), enableIPv6(fakeNSIf))
	})
	if err := step("IPv6", err); err != nil {
		return err
	}
	lo, err := h.LinkByName("lo")
	if err := step("lo", err); err != nil {
		return err
	}
	if err := step("lo up", h.LinkSetUp(lo)); err != nil {
		return err
	}
	eth, err := h.LinkByName(fakeNSIf)
	if err := step(fakeNSIf, err); err != nil {
		return err
	}
	for _, a := range []*netlink.Addr{
		{IPNet: prefixNet(f.nsSide)},
		{IPNet: prefixNet(f.nsSide6), Flags: unix.IFA_F_NODAD},
	} {
		if err := step("address "+a.IPNet.String(), h.AddrAdd(eth, a)); err != nil {
			return err
		}
	}
	if err := step(fakeNSIf+" up", h.LinkSetUp(eth)); err != nil {
		return err
	}
	for _, a := range []netip.Addr{fakeHostA, fakeHostB, fakeDNS, fakeHostA6} {
		if err := step("address "+a.String(), h.AddrAdd(lo, hostAddr(a))); err != nil {
			return err
		}
	}
	for _, gw := range []netip.Addr{f.hostSide.Addr(), f.hostSide6.Addr()} {
		def := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}
		if err := step("default route via "+gw.String(), h.RouteAdd(def)); err != nil {
			return err
		}
	}
	return nil
}

// hostAddr is a as a single-address netlink address, without duplicate
// address detection for IPv6.
func hostAddr(a netip.Addr) *netlink.Addr {
	na := &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(a, a.BitLen()))}
	if a.Is6() {
		na.Flags = unix.IFA_F_NODAD
	}
	return na
}

// serve opens the servers' sockets inside the namespace and serves them
// from the test process.
func (f *FakeInternet) serve(t testing.TB, ns netns.NsHandle) error {
	var (
		closers []io.Closer
		web     = map[netip.Addr][3]net.Listener{} // :80, :443, :7000
		dnsTCP  net.Listener
		dnsUDP  net.PacketConn
	)
	t.Cleanup(func() {
		for _, c := range closers {
			c.Close()
		}
	})
	err := inNetNS(ns, func() error {
		for _, a := range []netip.Addr{fakeHostA, fakeHostB, fakeHostA6} {
			var ls [3]net.Listener
			for i, port := range []uint16{80, 443, 7000} {
				l, err := net.Listen("tcp", netip.AddrPortFrom(a, port).String())
				if err != nil {
					return err
				}
				closers = append(closers, l)
				ls[i] = l
			}
			web[a] = ls
		}
		var err error
		if dnsTCP, err = net.Listen("tcp", f.DNS.String()); err != nil {
			return err
		}
		closers = append(closers, dnsTCP)
		if dnsUDP, err = net.ListenPacket("udp", f.DNS.String()); err != nil {
			return err
		}
		closers = append(closers, dnsUDP)
		return nil
	})
	if err != nil {
		return fmt.Errorf("netns %s: listen: %w", f.name, err)
	}

	// Refused handshakes are what egress tests provoke; they are not news.
	quiet := log.New(io.Discard, "", 0)
	httpSrv := &http.Server{Handler: http.HandlerFunc(f.handle), ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	httpsSrv := &http.Server{
		Handler:           http.HandlerFunc(f.handle),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          quiet,
		TLSConfig:         &tls.Config{GetCertificate: f.certificate, MinVersion: tls.VersionTLS12},
	}
	dnsServers := []*dns.Server{
		{Listener: dnsTCP, Handler: dns.HandlerFunc(f.serveDNS)},
		{PacketConn: dnsUDP, Handler: dns.HandlerFunc(f.serveDNS)},
	}
	t.Cleanup(func() {
		close(f.done)
		httpSrv.Close()
		httpsSrv.Close()
		for _, s := range dnsServers {
			s.Shutdown()
		}
		f.mu.Lock()
		for c := range f.echo {
			c.Close()
		}
		f.mu.Unlock()
		for _, c := range closers {
			c.Close()
		}
		f.wg.Wait()
	})

	for _, ls := range web {
		f.goServe(func() { httpSrv.Serve(ls[0]) })
		f.goServe(func() { httpsSrv.ServeTLS(ls[1], "", "") })
		f.goServe(func() { f.serveEcho(ls[2]) })
	}
	for _, s := range dnsServers {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		f.goServe(func() { errc <- s.ActivateAndServe() })
		select {
		case <-started:
		case err := <-errc:
			return fmt.Errorf("dns server: %w", err)
		}
	}
	return nil
}

func (f *FakeInternet) goServe(fn func()) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn()
	}()
}

// inNetNS runs fn on a thread in ns. The thread is thrown away afterwards,
// so no other goroutine ever runs in the namespace.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// handle answers the HTTP and HTTPS servers' requests and records them.
func (f *FakeInternet) handle(w http.ResponseWriter, r *http.Request) {
	var server netip.AddrPort
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server, _ = netip.ParseAddrPort(a.String())
		server = netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
	}
	req := FakeRequest{
		Server: server,
		Host:   r.Host,
		Path:   r.URL.Path,
		Header: r.Header.Clone(),
		Time:   time.Now(),
	}
	if r.TLS != nil {
		req.SNI = r.TLS.ServerName
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()

	w.Header().Set("X-Fake-Server", server.Addr().String())
	switch r.URL.Path {
	case "/headers":
		h := r.Header.Clone()
		h.Set("Host", r.Host) // Go keeps it out of r.Header
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h)
	case "/slow":
		f.slow(w, r, server.Addr())
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s host=%s\n", server.Addr(), r.Host)
	}
}

// slow streams a line every fakeSlowTick for fakeSlowFor, or until the
// client goes or the fixture ends.
func (f *FakeInternet) slow(w http.ResponseWriter, r *http.Request, server netip.Addr) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	tick := time.NewTicker(fakeSlowTick)
	defer tick.Stop()
	end := time.NewTimer(fakeSlowFor)
	defer end.Stop()
	for i := 0; ; i++ {
		if _, err := fmt.Fprintf(w, "line %d from %s\n", i, server); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-tick.C:
		case <-end.C:
			return
		case <-r.Context().Done():
			return
		case <-f.done:
			return
		}
	}
}

// serveEcho writes back whatever each connection to l sends.
func (f *FakeInternet) serveEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		select {
		case <-f.done:
			f.mu.Unlock()
			c.Close()
			return
		default:
		}
		f.echo[c] = struct{}{}
		f.mu.Unlock()
		f.goServe(func() {
			io.Copy(c, c)
			c.Close()
			f.mu.Lock()
			delete(f.echo, c)
			f.mu.Unlock()
		})
	}
}

// serveDNS answers for the names given to Resolve, authoritatively: an
// unknown name is NXDOMAIN, a known name without a record of the asked
// type (AAAA for an IPv4 name other than HostA) is an empty NOERROR. A
// name resolved to HostA has HostA6 as its AAAA record.
func (f *FakeInternet) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	question := q.Question[0]
	name := dns.CanonicalName(question.Name)
	hdr := dns.RR_Header{Name: question.Name, Class: dns.ClassINET, Ttl: FakeDNSTTL}

	f.mu.Lock()
	addr, ok := f.records[name]
	exists := ok || name == "test."
	for n := range f.records {
		// A name with names under it exists (RFC 8020), so resolvers
		// that minimise their queries still find the names below.
		exists = exists || strings.HasSuffix(n, "."+name)
	}
	f.mu.Unlock()
	if addr == fakeHostA && question.Qtype == dns.TypeAAAA {
		addr = fakeHostA6
	}

	switch {
	case ok && question.Qtype == dns.TypeA && addr.Is4():
		hdr.Rrtype = dns.TypeA
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: addr.AsSlice()})
	case ok && question.Qtype == dns.TypeAAAA && addr.Is6():
		hdr.Rrtype = dns.TypeAAAA
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: addr.AsSlice()})
	case name == "test." && question.Qtype == dns.TypeSOA:
		m.Answer = append(m.Answer, fakeSOA())
	case !exists:
		m.Rcode = dns.RcodeNameError
	}
	if len(m.Answer) == 0 && dns.IsSubDomain("test.", name) {
		m.Ns = append(m.Ns, fakeSOA())
	}
	w.WriteMsg(m)
}

func fakeSOA() *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: FakeDNSTTL},
		Ns:      "ns.test.",
		Mbox:    "hostmaster.test.",
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  FakeDNSTTL,
	}
}

// makeCA makes the fixture's CA and the servers' certificate.
func (f *FakeInternet) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Tupper fake internet CA " + f.name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("make CA: %w", err)
	}
	if f.caCert, err = x509.ParseCertificate(der); err != nil {
		return fmt.Errorf("make CA: %w", err)
	}
	f.caKey = key
	f.CA = x509.NewCertPool()
	f.CA.AddCert(f.caCert)
	f.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	f.leaf, err = f.mint(fakeCertNames, []netip.Addr{fakeHostA, fakeHostB, fakeHostA6})
	return err
}

// mint makes a server certificate for names and ips signed by the CA.
func (f *FakeInternet) mint(names []string, ips []netip.Addr) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    f.caCert.NotBefore,
		NotAfter:     f.caCert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCert, &key.PublicKey, f.caKey)
	if err != nil {
		return nil, fmt.Errorf("make certificate for %v: %w", names, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// certificate gives the servers' certificate, or for an SNI it does not
// cover (a name added with Resolve) one made for that name.
func (f *FakeInternet) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(hello.ServerName)
	if name == "" || f.leaf.Leaf.VerifyHostname(name) == nil {
		return f.leaf, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.minted[name]; ok {
		return c, nil
	}
	c, err := f.mint([]string{name}, nil)
	if err != nil {
		return nil, err
	}
	f.minted[name] = c
	return c, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func netPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if ones > a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// Own routes addr to the fake internet, gives the namespace that address,
// and returns a TCP listener on addr:port inside it, which accepts and
// closes connections. Tests use it for destinations that must stay
// unreachable (a private address, the metadata address): whatever a
// firewall under test does, the packets end in the test's namespace,
// never on the host's network. addr may be IPv4 or IPv6. Everything is
// undone at cleanup.
func (f *FakeInternet) Own(t testing.TB, addr netip.Addr, port uint16) net.Listener {
	t.Helper()
	addr = addr.Unmap()
	ns, err := netns.GetFromPath(f.NS)
	if err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	defer ns.Close()
	host := netip.PrefixFrom(addr, addr.BitLen())
	gw := f.nsSide.Addr()
	if addr.Is6() {
		gw = f.nsSide6.Addr()
	}
	link, err := netlink.LinkByName(f.hostIf)
	if err != nil {
		t.Fatalf("fake internet: veth %s: %v", f.hostIf, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatalf("fake internet: %v", err)
	}
	if err := h.AddrAdd(lo, hostAddr(addr)); err != nil && !errors.Is(err, unix.EEXIST) {
		t.Fatalf("fake internet: address %s: %v", addr, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(host), Gw: gw.AsSlice()}
	if err := netlink.RouteReplace(route); err != nil {
		t.Fatalf("fake internet: route %s: %v", host, err)
	}
	t.Cleanup(func() { netlink.RouteDel(route) })
	var l net.Listener
	if err := inNetNS(ns, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
		return err
	}); err != nil {
		t.Fatalf("fake internet: listen on %s: %v", netip.AddrPortFrom(addr, port), err)
	}
	t.Cleanup(func() { l.Close() })
	f.goServe(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	return l
}
