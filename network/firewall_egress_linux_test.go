package network

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// These tests build their own namespaces and veth pairs, independent of
// Pool: a "sandbox" on a tp* interface, an "internet" at 198.51.100.0/24
// and 203.0.113.0/24 (documentation ranges; the host's own uplink is
// 192.0.2.0/24), and a private network at 10.251.0.0/16. Traffic goes only
// between the host and these namespaces.

var (
	testSandboxNet  = netip.MustParsePrefix("10.251.0.0/16")
	testInternetNet = netip.MustParsePrefix("198.51.100.0/24")
	// IPv6 links pair with the /30s of the IPv4 ones, as the pool's do:
	// sandbox and private links in a /64 of the pool's ULA /48 that no
	// pool uses, the internet link in a documentation range.
	testSandboxNet6  = netip.MustParsePrefix("fd74:7570:7065:fb::/64")
	testInternetNet6 = netip.MustParsePrefix("2001:db8:ffff::/64")
)

// testLink is a network namespace the test made, joined to the host by a
// veth pair: the host side carries hostAddr (.1 of a /30), eth0 inside
// carries addr (.2); with addIPv6, hostAddr6 and addr6 (::1 and ::2 of a
// /126).
type testLink struct {
	ns               string
	hostIf           string
	hostAddr         netip.Prefix
	addr             netip.Prefix
	hostAddr6, addr6 netip.Prefix
	slot             int
}

// randomIfName returns prefix and hex digits, 13 characters in all.
func randomIfName(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return (prefix + hex.EncodeToString(b))[:13]
}

// makeTestLink makes a namespace and a veth pair whose host side is named
// ifPrefix..., in a /30 of subnet that no host interface uses. Everything is
// removed when the test ends.
func makeTestLink(t *testing.T, ifPrefix string, subnet netip.Prefix) *testLink {
	t.Helper()
	l := &testLink{ns: filepath.Join(t.TempDir(), "netns"), hostIf: randomIfName(ifPrefix)}
	if err := createNetNS(l.ns, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeNetNS(l.ns) })
	ns, err := netns.GetFromPath(l.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: l.hostIf},
		PeerName:      SandboxIfName,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s: %v", l.hostIf, err)
	}
	t.Cleanup(func() { deleteLink(l.hostIf) })
	for _, s := range []struct{ path, value string }{
		{"/proc/sys/net/ipv6/conf/" + l.hostIf + "/disable_ipv6", "1"},
		{"/proc/sys/net/ipv4/conf/" + l.hostIf + "/rp_filter", "1"},
	} {
		if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link, err := netlink.LinkByName(l.hostIf)
	if err != nil {
		t.Fatal(err)
	}

	// Pick a free /30 of a block under the block's lock, as the pool
	// does, so that concurrent tests and pools never share one.
	block := mathrand.IntN(blocks(subnet))
	unlock, err := lockFile(context.Background(), blockLockPath(DefaultLockPath(subnet), block))
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := listAddrs()
	if err != nil {
		unlock()
		t.Fatal(err)
	}
	taken := map[int]bool{0: true} // the first /30 holds the subnet's network address
	for _, a := range addrs {
		if n, ok := slotOf(subnet, a); ok {
			taken[n] = true
		}
	}
	first, total := blockRange(subnet, block)
	start := mathrand.IntN(total)
	l.slot = -1
	for i := range total {
		if n := first + (start+i)%total; !taken[n] {
			l.slot = n
			break
		}
	}
	if l.slot < 0 {
		unlock()
		t.Fatalf("no free /30 in %s", subnet)
	}
	l.hostAddr, l.addr, _ = slot(subnet, l.slot)
	err = netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(l.hostAddr)})
	unlock()
	if err != nil {
		t.Fatalf("address %s on %s: %v", l.hostAddr, l.hostIf, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	if err := configureSandboxSide(ns, &Endpoint{HostAddr: l.hostAddr, SandboxAddr: l.addr}); err != nil {
		t.Fatal(err)
	}
	return l
}

// addIPv6 gives the link the slot6 pair of its /30 in subnet6 and, with
// route, the namespace a default route through the host side (without
// one, the namespace answers only its own link: what the host forwards to
// it must be masqueraded). The addresses skip duplicate address
// detection, which would hold them back for a second.
func (l *testLink) addIPv6(t *testing.T, subnet6 netip.Prefix, route bool) {
	t.Helper()
	l.hostAddr6, l.addr6 = slot6(subnet6, l.slot)
	for _, k := range []struct{ key, value string }{{"accept_ra", "0"}, {"disable_ipv6", "0"}} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+l.hostIf+"/"+k.key, []byte(k.value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link, err := netlink.LinkByName(l.hostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(l.hostAddr6), Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatalf("address %s on %s: %v", l.hostAddr6, l.hostIf, err)
	}
	err = l.in(func() error {
		// /proc/sys/net is the namespace of the thread that opens it.
		for _, k := range []struct{ key, value string }{{"accept_ra", "0"}, {"accept_dad", "0"}, {"disable_ipv6", "0"}} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+SandboxIfName+"/"+k.key, []byte(k.value), 0o644); err != nil {
				return err
			}
		}
		eth, err := netlink.LinkByName(SandboxIfName)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(l.addr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return fmt.Errorf("address %s: %w", l.addr6, err)
		}
		if !route {
			return nil
		}
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: eth.Attrs().Index,
			Dst:       ipNet(netip.MustParsePrefix("::/0")),
			Gw:        l.hostAddr6.Addr().AsSlice(),
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// in runs f in the link's namespace.
func (l *testLink) in(f func() error) error { return inNetNS(l.ns, f) }

// listenIn listens on TCP addr:0 in the namespace at path, or on the host
// when path is empty, and serves each connection with serve.
func listenIn(t *testing.T, path, addr string, serve func(net.Conn)) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	listen := func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(addr, "0"))
		return err
	}
	var err error
	if path == "" {
		err = listen()
	} else {
		err = inNetNS(path, listen)
	}
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func sayHello(c net.Conn) { fmt.Fprintln(c, "hello") }

// echoLines answers each line with itself until the peer goes.
func echoLines(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}

// egressEnv is a sandbox with egress sysctls, an internet and a private
// network to reach, and the host's DNS and proxy stand-ins.
type egressEnv struct {
	sbx, inet, priv *testLink
	inetAlt         netip.Addr // an address in 203.0.113.0/24, inside inet

	hostSvc  netip.AddrPort // on the sandbox's host side address
	inetSvc  netip.AddrPort // 198.51.100.x
	altSvc   netip.AddrPort // 203.0.113.x
	privSvc  netip.AddrPort // 10.251.x
	dnsPort  uint16         // UDP and TCP on 127.0.0.1
	proxy    netip.AddrPort // on 127.0.0.1
	proxyDst chan netip.AddrPort
}

func newEgressEnv(t *testing.T) *egressEnv {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	ctx := context.Background()
	if err := ensureEgressBase(ctx, DefaultIfPrefix); err != nil {
		t.Fatal(err)
	}
	e := &egressEnv{
		sbx:  makeTestLink(t, DefaultIfPrefix+"t", testSandboxNet),
		inet: makeTestLink(t, "tzi", testInternetNet),
		priv: makeTestLink(t, "tzp", testSandboxNet),
	}
	t.Cleanup(func() { removeSandboxFirewall(context.Background(), e.sbx.hostIf) })
	if err := enableEgressSysctls(e.sbx.hostIf); err != nil {
		t.Fatal(err)
	}

	// A second "internet" range, routed through inet; its slot makes it
	// as unique as inet's /30.
	e.inetAlt = netip.AddrFrom4([4]byte{203, 0, 113, byte(4*e.inet.slot + 2)})
	err := e.inet.in(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(e.inetAlt, 32))})
	})
	if err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(e.inet.hostIf)
	if err != nil {
		t.Fatal(err)
	}
	route := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       ipNet(netip.PrefixFrom(e.inetAlt, 32)),
		Gw:        e.inet.addr.Addr().AsSlice(),
	}
	if err := netlink.RouteAdd(route); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.RouteDel(route) })

	e.hostSvc = listenIn(t, "", e.sbx.hostAddr.Addr().String(), sayHello)
	e.inetSvc = listenIn(t, e.inet.ns, e.inet.addr.Addr().String(), sayHello)
	e.altSvc = listenIn(t, e.inet.ns, e.inetAlt.String(), sayHello)
	e.privSvc = listenIn(t, e.priv.ns, e.priv.addr.Addr().String(), sayHello)
	e.dnsPort = serveDNSStandIn(t)
	e.proxyDst = make(chan netip.AddrPort, 16)
	e.proxy = listenIn(t, "", "127.0.0.1", func(c net.Conn) {
		dst, err := testOriginalDst(c)
		if err != nil {
			t.Errorf("proxy: %v", err)
			return
		}
		e.proxyDst <- dst
		sayHello(c)
	})
	return e
}

// serveDNSStandIn listens on one port of 127.0.0.1 for UDP and TCP and
// answers "dns:" and what it got.
func serveDNSStandIn(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := tl.Addr().(*net.TCPAddr).Port
		ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			tl.Close()
			continue
		}
		t.Cleanup(func() { tl.Close(); ul.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := ul.ReadFrom(buf)
				if err != nil {
					return
				}
				ul.WriteTo(append([]byte("dns:"), buf[:n]...), from)
			}
		}()
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					line, _ := bufio.NewReader(c).ReadString('\n')
					fmt.Fprint(c, "dns:"+line)
				}()
			}
		}()
		return uint16(port)
	}
	t.Fatal("no port free for both UDP and TCP")
	return 0
}

// testOriginalDst returns where c was headed before the DNAT (SO_ORIGINAL_DST).
func testOriginalDst(c net.Conn) (netip.AddrPort, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var mreq *unix.IPv6Mreq // 20 bytes: room for a struct sockaddr_in
	var serr error
	err = raw.Control(func(fd uintptr) {
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	b := mreq.Multiaddr
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
}

// firewall returns the sandbox's firewall with the usual forbidden set
// (the always-denied ranges and the sandbox's own /30), changed by mod.
func (e *egressEnv) firewall(mod func(*sandboxFirewall)) *sandboxFirewall {
	fw := &sandboxFirewall{
		HostIf:      e.sbx.hostIf,
		SandboxAddr: e.sbx.addr.Addr(),
		HostAddr:    e.sbx.hostAddr.Addr(),
		Forbidden:   append(netpolicy.AlwaysDenied(), e.sbx.hostAddr.Masked()),
		DNSPort:     e.dnsPort,
		ProxyPort:   e.proxy.Port(),
	}
	if mod != nil {
		mod(fw)
	}
	return fw
}

func (e *egressEnv) apply(t *testing.T, mod func(*sandboxFirewall)) []string {
	t.Helper()
	names, err := applySandboxFirewall(context.Background(), e.firewall(mod))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func policy(t *testing.T, allow, deny []string) *netpolicy.Compiled {
	t.Helper()
	return compile(t, &netpolicy.Policy{AllowOut: allow, DenyOut: deny})
}

// wantReach checks that the sandbox gets "hello" from dst.
func (e *egressEnv) wantReach(t *testing.T, dst netip.AddrPort) {
	t.Helper()
	if err := e.sbx.in(func() error { return dialHello(dst.String()) }); err != nil {
		t.Errorf("sandbox to %s: %v, want hello", dst, err)
	}
}

// wantRefused checks that the sandbox's connect to dst fails at once with
// a reset, not after a timeout.
func (e *egressEnv) wantRefused(t *testing.T, dst netip.AddrPort) {
	t.Helper()
	begin := time.Now()
	err := e.sbx.in(func() error {
		c, err := net.DialTimeout("tcp", dst.String(), 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	took := time.Since(begin)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("sandbox to %s: %v, want connection refused", dst, err)
	} else if took > time.Second {
		t.Errorf("sandbox to %s: refused after %v, want at once", dst, took)
	}
}

func TestEgressBase(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	ctx := context.Background()
	for range 2 {
		if err := ensureEgressBase(ctx, DefaultIfPrefix); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward = %q, %v; want 1", b, err)
	}
	out, err := exec.Command("nft", "list", "chain", "inet", firewallTable, "forward").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	_, recErr := os.Stat(ipForwardRecord)
	guard := false // for IPv4; TestIPv6Forwarding checks the IPv6 one
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "iifname != @sbxif oifname != @sbxif drop") && !strings.Contains(line, "nfproto ipv6") {
			guard = true
		}
	}
	if guard != (recErr == nil) {
		t.Errorf("guard rule present %v, but %s: %v", guard, ipForwardRecord, recErr)
	}
	if n := strings.Count(string(out), "iifname vmap @sbxfwd"); n != 1 {
		t.Errorf("the forward chain dispatches %d times after two installs, want 1:\n%s", n, out)
	}
	// Another pool's prefix joins the set rather than replacing it.
	out, err = exec.Command("nft", "list", "set", "inet", firewallTable, sandboxIfSet).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"tp*"`) {
		t.Errorf("set %s: %v: %s", sandboxIfSet, err, out)
	}
}

func TestEgressSysctls(t *testing.T) {
	requireRoot(t)
	for _, tt := range []struct {
		name   string
		enable func(string) error
		family string
		want   map[string]string
	}{
		{"ipv4", enableEgressSysctls, "ipv4", map[string]string{"forwarding": "1", "route_localnet": "1", "rp_filter": "1"}},
		{"ipv6", enableEgressSysctls6, "ipv6", map[string]string{"forwarding": "1", "disable_ipv6": "0", "accept_ra": "0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := makeTestLink(t, "tzs", testSandboxNet)
			if err := tt.enable(l.hostIf); err != nil {
				t.Fatal(err)
			}
			for key, want := range tt.want {
				path := "/proc/sys/net/" + tt.family + "/conf/" + l.hostIf + "/" + key
				if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != want {
					t.Errorf("%s = %q, %v; want %s", path, b, err, want)
				}
			}
			if err := tt.enable("../all"); err == nil {
				t.Error("a path was accepted as an interface name")
			}
		})
	}
}

func TestEgressFirewall(t *testing.T) {
	e := newEgressEnv(t)
	ctx := context.Background()

	t.Run("no chain reaches nothing", func(t *testing.T) {
		e.wantRefused(t, e.inetSvc)
		e.wantRefused(t, e.hostSvc)
	})

	t.Run("forbidden", func(t *testing.T) {
		names := e.apply(t, nil)
		if want := []string{ruleAlwaysDenied, ruleNoIPv6}; !slices.Equal(names, want) {
			t.Errorf("rule names %q, want %q", names, want)
		}
		e.wantRefused(t, e.hostSvc)
		e.wantRefused(t, e.privSvc)
		e.wantReach(t, e.inetSvc)
		e.wantReach(t, e.altSvc)
	})

	t.Run("denyOut blocks its range only", func(t *testing.T) {
		e.apply(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, nil, []string{"203.0.113.0/24"}) })
		e.wantRefused(t, e.altSvc)
		e.wantReach(t, e.inetSvc)
	})

	t.Run("allowOut wins over denyOut", func(t *testing.T) {
		e.apply(t, func(fw *sandboxFirewall) {
			fw.Policy = policy(t, []string{e.inetAlt.String()}, []string{"0.0.0.0/0"})
		})
		e.wantReach(t, e.altSvc)
		e.wantRefused(t, e.inetSvc)
	})

	t.Run("exempt lifts forbidden", func(t *testing.T) {
		e.apply(t, func(fw *sandboxFirewall) { fw.Exempt = []netip.Prefix{e.priv.addr.Masked()} })
		e.wantReach(t, e.privSvc)
		e.wantRefused(t, e.hostSvc)
		// An exempt destination is still subject to the policy.
		e.apply(t, func(fw *sandboxFirewall) {
			fw.Exempt = []netip.Prefix{e.priv.addr.Masked()}
			fw.Policy = policy(t, nil, []string{"10.0.0.0/8"})
		})
		e.wantRefused(t, e.privSvc)
	})

	t.Run("MSS is clamped to the route", func(t *testing.T) {
		e.apply(t, nil)
		link, err := netlink.LinkByName(e.inet.hostIf)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetMTU(link, 1400); err != nil {
			t.Fatal(err)
		}
		defer netlink.LinkSetMTU(link, 1500)
		mss := make(chan int, 1)
		svc := listenIn(t, e.inet.ns, e.inet.addr.Addr().String(), func(c net.Conn) {
			raw, _ := c.(*net.TCPConn).SyscallConn()
			raw.Control(func(fd uintptr) {
				v, _ := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
				mss <- v
			})
			sayHello(c)
		})
		e.wantReach(t, svc)
		// 1400 less 40 bytes of headers, less TCP options; unclamped the
		// veth's 1500 would give 1460.
		if got := <-mss; got > 1360 || got < 1300 {
			t.Errorf("the server sees an MSS of %d, want the 1400 MTU's (at most 1360)", got)
		}
	})

	t.Run("DNS goes to the host's resolver", func(t *testing.T) {
		// Even a policy that denies everything leaves DNS to the resolver.
		e.apply(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, nil, []string{"0.0.0.0/0"}) })
		for _, dst := range []netip.Addr{e.sbx.hostAddr.Addr(), e.inet.addr.Addr()} {
			to := netip.AddrPortFrom(dst, 53).String()
			err := e.sbx.in(func() error {
				c, err := net.Dial("udp", to)
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Write([]byte("q")); err != nil {
					return err
				}
				buf := make([]byte, 64)
				n, err := c.Read(buf)
				if err != nil {
					return err
				}
				if string(buf[:n]) != "dns:q" {
					return fmt.Errorf("got %q", buf[:n])
				}
				return nil
			})
			if err != nil {
				t.Errorf("UDP %s: %v", to, err)
			}
			err = e.sbx.in(func() error {
				c, err := net.DialTimeout("tcp", to, 2*time.Second)
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				fmt.Fprintln(c, "q")
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return err
				}
				if line != "dns:q\n" {
					return fmt.Errorf("got %q", line)
				}
				return nil
			})
			if err != nil {
				t.Errorf("TCP %s: %v", to, err)
			}
		}
	})

	t.Run("HTTP goes to the proxy when the policy inspects", func(t *testing.T) {
		e.apply(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, []string{"example.com"}, nil) })
		for _, port := range []uint16{80, 443} {
			dst := netip.AddrPortFrom(e.inetAlt, port)
			e.wantReach(t, dst)
			select {
			case got := <-e.proxyDst:
				if got != dst {
					t.Errorf("the proxy saw original destination %s, want %s", got, dst)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("the proxy saw no connection for %s", dst)
			}
		}
		// Forbidden destinations are refused, not proxied.
		e.wantRefused(t, netip.AddrPortFrom(e.priv.addr.Addr(), 443))
		// Other ports go straight out.
		e.wantReach(t, e.altSvc)
		// Without domains nothing is proxied.
		e.apply(t, nil)
		err := e.sbx.in(func() error {
			return dialHello(netip.AddrPortFrom(e.inetAlt, 80).String())
		})
		if !errors.Is(err, syscall.ECONNREFUSED) { // nothing listens on inet's port 80
			t.Errorf("port 80 without domains: %v, want refused by the destination", err)
		}
	})

	t.Run("a replace cuts established connections", func(t *testing.T) {
		e.apply(t, nil)
		svc := listenIn(t, e.inet.ns, e.inetAlt.String(), echoLines)
		// The socket keeps its namespace; only the dial runs in it. (nft,
		// run from there, would change the namespace's rules instead.)
		var c net.Conn
		err := e.sbx.in(func() error {
			var err error
			c, err = net.DialTimeout("tcp", svc.String(), 2*time.Second)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		c.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintln(c, "one")
		if line, err := r.ReadString('\n'); err != nil || line != "one\n" {
			t.Fatalf("before the replace: %q, %v", line, err)
		}
		e.apply(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, nil, []string{"203.0.113.0/24"}) })
		fmt.Fprintln(c, "two")
		line, err := r.ReadString('\n')
		if err == nil {
			t.Errorf("after the replace the connection still carries %q", line)
		} else if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("after the replace: %v, want connection reset", err)
		}
	})

	t.Run("denials are logged", func(t *testing.T) {
		type denial = testDenial
		group, got := listenTestDenials(ctx, t)
		names := e.apply(t, func(fw *sandboxFirewall) {
			fw.Policy = policy(t, nil, []string{"0.0.0.0/0", "203.0.113.0/24"})
			fw.LogGroup = group
		})
		for _, tc := range []struct {
			dst  netip.AddrPort
			rule string
		}{
			{e.altSvc, `denyOut "203.0.113.0/24"`},
			{e.inetSvc, `denyOut "0.0.0.0/0"`},
			{e.privSvc, ruleAlwaysDenied},
		} {
			e.wantRefused(t, tc.dst)
			want := denial{e.sbx.hostIf, slices.Index(names, tc.rule), "tcp", tc.dst}
			select {
			case d := <-got:
				if d != want {
					t.Errorf("denial %+v, want %+v (%s)", d, want, tc.rule)
				}
			case <-time.After(3 * time.Second):
				t.Errorf("no denial logged for %s", tc.dst)
			}
			// A SYN may be retried; forget the repeats.
			for len(got) > 0 {
				<-got
			}
		}
		if _, err := listenDenials(ctx, group, func(string, int, string, netip.AddrPort) {}); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("a second listener of the group: %v, want ErrAlreadyExists", err)
		}
	})

	t.Run("remove is idempotent", func(t *testing.T) {
		e.apply(t, nil)
		for range 2 {
			if err := removeSandboxFirewall(ctx, e.sbx.hostIf); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command("nft", "list", "table", "inet", firewallTable).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		if strings.Contains(string(out), e.sbx.hostIf) {
			t.Errorf("the table still names %s:\n%s", e.sbx.hostIf, out)
		}
		e.wantRefused(t, e.inetSvc)
		// Removing what never existed is fine too.
		if err := removeSandboxFirewall(ctx, randomIfName("tp")); err != nil {
			t.Error(err)
		}
	})

	// Last: the flows it opens stay tracked for half a minute.
	t.Run("redirected flows are capped per sandbox", func(t *testing.T) {
		e.apply(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, nil, []string{"0.0.0.0/0"}) })
		to := netip.AddrPortFrom(e.sbx.hostAddr.Addr(), 53).String()
		var answered, refused int
		err := e.sbx.in(func() error {
			// Each socket is a flow of its own, as each lookup of a
			// resolver library is.
			for range maxRedirectedFlows + 200 {
				c, err := net.Dial("udp", to)
				if err != nil {
					return err
				}
				c.SetDeadline(time.Now().Add(200 * time.Millisecond))
				c.Write([]byte("q"))
				buf := make([]byte, 16)
				if _, err := c.Read(buf); err == nil {
					answered++
				} else {
					refused++
				}
				c.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The kernel's count is lazy (it prunes its list as it goes), so
		// the cap holds to within a few percent.
		if answered > maxRedirectedFlows*11/10 || refused == 0 {
			t.Errorf("%d lookups answered and %d refused; want about %d answered at most", answered, refused, maxRedirectedFlows)
		}
	})
}

// egressEnv6 is an egressEnv whose sandbox, internet and private network
// have IPv6 too, with IPv6 forwarding on.
type egressEnv6 struct {
	*egressEnv
	inet6, inet6Alt netip.Addr // 2001:db8::10:n and 2001:db8:1::10:n, inside inet, routed by the host

	hostSvc6    netip.AddrPort // on the sandbox's host side IPv6 address
	inetSvc6    netip.AddrPort // on inet6
	altSvc6     netip.AddrPort // on inet6Alt
	linkSvc6    netip.AddrPort // on inet's own link address: on a network the host is attached to
	privSvc6    netip.AddrPort // on priv's ULA address
	inetHostSvc netip.AddrPort // on the host's address on inet's link
}

func newEgressEnv6(t *testing.T) *egressEnv6 {
	t.Helper()
	e := &egressEnv6{egressEnv: newEgressEnv(t)}
	if err := ensureIPv6Forwarding(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.sbx.addIPv6(t, testSandboxNet6, true)
	e.priv.addIPv6(t, testSandboxNet6, false)
	e.inet.addIPv6(t, testInternetNet6, false)
	if err := enableEgressSysctls6(e.sbx.hostIf); err != nil {
		t.Fatal(err)
	}

	// Two "internet" addresses inside inet, as unique as its /30, each
	// routed from the host through inet's link address only: nothing
	// else of 2001:db8::/32 is routed anywhere.
	at := func(base string) netip.Addr {
		b := netip.MustParseAddr(base).As16()
		b[15] = byte(e.inet.slot)
		return netip.AddrFrom16(b)
	}
	e.inet6, e.inet6Alt = at("2001:db8::10:0"), at("2001:db8:1::10:0")
	err := e.inet.in(func() error {
		eth, err := netlink.LinkByName(SandboxIfName)
		if err != nil {
			return err
		}
		for _, a := range []netip.Addr{e.inet6, e.inet6Alt} {
			if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, 128)), Flags: unix.IFA_F_NODAD}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(e.inet.hostIf)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{e.inet6, e.inet6Alt} {
		route := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       ipNet(netip.PrefixFrom(a, 128)),
			Gw:        e.inet.addr6.Addr().AsSlice(),
		}
		if err := netlink.RouteAdd(route); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netlink.RouteDel(route) })
	}

	e.hostSvc6 = listenIn(t, "", e.sbx.hostAddr6.Addr().String(), sayHello)
	e.inetSvc6 = listenIn(t, e.inet.ns, e.inet6.String(), sayHello)
	e.altSvc6 = listenIn(t, e.inet.ns, e.inet6Alt.String(), sayHello)
	e.linkSvc6 = listenIn(t, e.inet.ns, e.inet.addr6.Addr().String(), sayHello)
	e.privSvc6 = listenIn(t, e.priv.ns, e.priv.addr6.Addr().String(), sayHello)
	e.inetHostSvc = listenIn(t, "", e.inet.hostAddr6.Addr().String(), sayHello)
	return e
}

// firewall6 is firewall with the sandbox's IPv6 addresses, and with the
// host's own IPv6 addresses and the networks they are on forbidden, as
// Egress forbids them.
func (e *egressEnv6) firewall6(mod func(*sandboxFirewall)) func(*sandboxFirewall) {
	return func(fw *sandboxFirewall) {
		fw.SandboxAddr6 = e.sbx.addr6.Addr()
		fw.HostAddr6 = e.sbx.hostAddr6.Addr()
		for _, p := range []netip.Prefix{e.sbx.hostAddr6, e.inet.hostAddr6} {
			fw.Forbidden = append(fw.Forbidden, netip.PrefixFrom(p.Addr(), 128), p.Masked())
		}
		if mod != nil {
			mod(fw)
		}
	}
}

func (e *egressEnv6) apply6(t *testing.T, mod func(*sandboxFirewall)) []string {
	t.Helper()
	return e.apply(t, e.firewall6(mod))
}

// listenPortIn listens on TCP addr:port in the namespace at path and says
// hello to each connection.
func listenPortIn(t *testing.T, path string, addr netip.Addr, port uint16) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	err := inNetNS(path, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			sayHello(c)
			c.Close()
		}
	}()
	return netip.AddrPortFrom(addr, port)
}

func TestIPv6Forwarding(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	ctx := context.Background()
	if err := ensureEgressBase(ctx, DefaultIfPrefix); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ensureIPv6Forwarding(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("net.ipv6.conf.all.forwarding = %q, %v; want 1", b, err)
	}
	out, err := exec.Command("nft", "list", "chain", "inet", firewallTable, "forward").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	_, err4 := os.Stat(ipForwardRecord)
	rec6, err6 := os.ReadFile(ipv6ForwardRecord)
	want := ""
	switch {
	case err4 == nil && err6 == nil:
		want = "\t\tiifname != @sbxif oifname != @sbxif drop"
	case err4 == nil:
		want = "\t\tmeta nfproto ipv4 iifname != @sbxif oifname != @sbxif drop"
	case err6 == nil:
		want = "\t\tmeta nfproto ipv6 iifname != @sbxif oifname != @sbxif drop"
	}
	guards := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "iifname != @sbxif oifname != @sbxif drop") {
			guards++
			if line != want {
				t.Errorf("guard rule %q, want %q (records: IPv4 %v, IPv6 %v)", line, want, err4, err6)
			}
		}
	}
	if guards != min(1, len(want)) {
		t.Errorf("%d guard rules, want %q:\n%s", guards, want, out)
	}
	// What the record says was raised to 2 stays there.
	for _, line := range strings.Split(string(rec6), "\n") {
		names, ok := strings.CutPrefix(line, "tupper set accept_ra from 1 to 2 on: ")
		if !ok {
			continue
		}
		for _, name := range strings.Fields(names) {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + name + "/accept_ra")
			if err == nil && strings.TrimSpace(string(b)) == "1" {
				t.Errorf("accept_ra of %s is 1 again", name)
			}
		}
	}
}

func TestKeepAcceptingRA(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]string{"all": "1", "default": "1", "eth0": "0", "eth1": "1", "wlan0": "2"} {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name, "accept_ra"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "gone"), 0o755) // an interface that went away meanwhile
	note, err := keepAcceptingRA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tupper set accept_ra from 1 to 2 on: all default eth1"; note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	for name, want := range map[string]string{"all": "2", "default": "2", "eth0": "0", "eth1": "2", "wlan0": "2"} {
		b, _ := os.ReadFile(filepath.Join(dir, name, "accept_ra"))
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("accept_ra of %s = %q, want %q", name, got, want)
		}
	}
	if note, err := keepAcceptingRA(dir); note != "" || err != nil {
		t.Errorf("second run: %q, %v; want nothing", note, err)
	}
}

func TestEgressFirewallIPv6(t *testing.T) {
	e := newEgressEnv6(t)
	ctx := context.Background()

	t.Run("no chain reaches nothing", func(t *testing.T) {
		e.wantRefused(t, e.inetSvc6)
		e.wantRefused(t, e.hostSvc6)
	})

	t.Run("no policy", func(t *testing.T) {
		names := e.apply6(t, nil)
		if want := []string{ruleAlwaysDenied}; !slices.Equal(names, want) {
			t.Errorf("rule names %q, want %q", names, want)
		}
		e.wantReach(t, e.inetSvc6)
		e.wantReach(t, e.altSvc6)
		e.wantReach(t, e.inetSvc)
	})

	t.Run("forbidden", func(t *testing.T) {
		e.apply6(t, nil)
		for _, dst := range []netip.AddrPort{
			e.hostSvc6,    // the host side's own ULA address
			e.inetHostSvc, // another of the host's addresses
			e.privSvc6,    // fc00::/7, routed through the host
			e.linkSvc6,    // on a network the host is attached to
		} {
			e.wantRefused(t, dst)
		}
	})

	t.Run("denyOut ::/0 refuses", func(t *testing.T) {
		e.apply6(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, nil, []string{"::/0"}) })
		e.wantRefused(t, e.inetSvc6)
		e.wantRefused(t, e.altSvc6)
		e.wantReach(t, e.inetSvc)
	})

	t.Run("allowOut wins over denyOut", func(t *testing.T) {
		e.apply6(t, func(fw *sandboxFirewall) {
			fw.Policy = policy(t, []string{e.inet6.String()}, []string{"::/0"})
		})
		e.wantReach(t, e.inetSvc6)
		e.wantRefused(t, e.altSvc6)
	})

	t.Run("exempt lifts forbidden", func(t *testing.T) {
		e.apply6(t, func(fw *sandboxFirewall) { fw.Exempt = []netip.Prefix{e.priv.addr6.Masked()} })
		e.wantReach(t, e.privSvc6)
		e.wantRefused(t, e.hostSvc6)
	})

	t.Run("a spoofed source is dropped", func(t *testing.T) {
		e.apply6(t, nil)
		// The /126's last address, unused: the sandbox gives it to itself.
		spoof := e.sbx.addr6.Addr().Next()
		err := e.sbx.in(func() error {
			eth, err := netlink.LinkByName(SandboxIfName)
			if err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(spoof, 128)), Flags: unix.IFA_F_NODAD}
			if err := netlink.AddrAdd(eth, addr); err != nil {
				return err
			}
			// Later connects would choose it as their source.
			defer netlink.AddrDel(eth, addr)
			// Long enough for a SYN retry: the host must first find the
			// new address's neighbour.
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: spoof.AsSlice()}}
			c, err := d.Dial("tcp", e.inetSvc6.String())
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a connect from %s: %v, want a timeout", spoof, err)
		}
	})

	t.Run("HTTP over IPv6 is refused when the policy inspects", func(t *testing.T) {
		web := []netip.AddrPort{listenPortIn(t, e.inet.ns, e.inet6, 80), listenPortIn(t, e.inet.ns, e.inet6, 443)}
		e.apply6(t, nil)
		for _, dst := range web {
			e.wantReach(t, dst)
		}
		names := e.apply6(t, func(fw *sandboxFirewall) { fw.Policy = policy(t, []string{"example.com"}, nil) })
		if want := []string{ruleAlwaysDenied, ruleIPv6Web}; !slices.Equal(names, want) {
			t.Errorf("rule names %q, want %q", names, want)
		}
		for _, dst := range web {
			e.wantRefused(t, dst)
		}
		// Other ports go straight out.
		e.wantReach(t, e.inetSvc6)
	})

	t.Run("a sandbox without IPv6 is refused all of it", func(t *testing.T) {
		names := e.apply(t, nil) // no SandboxAddr6
		if want := []string{ruleAlwaysDenied, ruleNoIPv6}; !slices.Equal(names, want) {
			t.Errorf("rule names %q, want %q", names, want)
		}
		e.wantRefused(t, e.inetSvc6)
		e.wantRefused(t, e.altSvc6)
		e.wantReach(t, e.inetSvc)
	})

	t.Run("MSS is clamped to the route", func(t *testing.T) {
		e.apply6(t, nil)
		link, err := netlink.LinkByName(e.inet.hostIf)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetMTU(link, 1400); err != nil {
			t.Fatal(err)
		}
		defer netlink.LinkSetMTU(link, 1500)
		mss := make(chan int, 1)
		svc := listenIn(t, e.inet.ns, e.inet6.String(), func(c net.Conn) {
			raw, _ := c.(*net.TCPConn).SyscallConn()
			raw.Control(func(fd uintptr) {
				v, _ := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
				mss <- v
			})
			sayHello(c)
		})
		e.wantReach(t, svc)
		// 1400 less 60 bytes of headers, less TCP options; unclamped the
		// veth's 1500 would give 1440.
		select {
		case got := <-mss:
			if got > 1340 || got < 1280 {
				t.Errorf("the server sees an MSS of %d, want the 1400 MTU's (at most 1340)", got)
			}
		case <-time.After(3 * time.Second):
			t.Error("the server saw no connection")
		}
	})

	t.Run("denials are logged", func(t *testing.T) {
		type denial = testDenial
		group, got := listenTestDenials(ctx, t)
		web := listenPortIn(t, e.inet.ns, e.inet6Alt, 443)
		for _, tc := range []struct {
			name   string
			mod    func(*sandboxFirewall)
			dst    netip.AddrPort
			rule   string
			wantAt int
		}{
			{"most specific denyOut", e.firewall6(func(fw *sandboxFirewall) {
				fw.Policy = policy(t, nil, []string{"::/0", "2001:db8:1::/48", "0.0.0.0/0"})
			}), e.altSvc6, `denyOut "2001:db8:1::/48"`, 2},
			{"the wider denyOut", e.firewall6(func(fw *sandboxFirewall) {
				fw.Policy = policy(t, nil, []string{"::/0", "2001:db8:1::/48", "0.0.0.0/0"})
			}), e.inetSvc6, `denyOut "::/0"`, 1},
			{"always denied", e.firewall6(nil), e.privSvc6, ruleAlwaysDenied, 0},
			{"HTTP under a domain policy", e.firewall6(func(fw *sandboxFirewall) {
				fw.Policy = policy(t, []string{"example.com"}, []string{"10.0.0.0/8"})
			}), web, ruleIPv6Web, 2},
			{"no IPv6", func(*sandboxFirewall) {}, e.inetSvc6, ruleNoIPv6, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				names := e.apply(t, func(fw *sandboxFirewall) {
					tc.mod(fw)
					fw.LogGroup = group
				})
				if idx := slices.Index(names, tc.rule); idx != tc.wantAt {
					t.Errorf("rule %q at %d of %q, want %d", tc.rule, idx, names, tc.wantAt)
				}
				e.wantRefused(t, tc.dst)
				want := denial{e.sbx.hostIf, tc.wantAt, "tcp", tc.dst}
				select {
				case d := <-got:
					if d != want {
						t.Errorf("denial %+v, want %+v (%s)", d, want, tc.rule)
					}
				case <-time.After(3 * time.Second):
					t.Errorf("no denial logged for %s", tc.dst)
				}
				// A SYN may be retried; forget the repeats.
				time.Sleep(50 * time.Millisecond)
				for len(got) > 0 {
					<-got
				}
			})
		}
	})
}

// testDenial is one denial the NFLOG listener reported.
type testDenial struct {
	hostIf string
	idx    int
	proto  string
	dst    netip.AddrPort
}

// listenTestDenials listens on a fresh NFLOG group until the test ends and
// returns the group and the denials it reports.
func listenTestDenials(ctx context.Context, t *testing.T) (uint16, <-chan testDenial) {
	t.Helper()
	group := logGroupFor(t.TempDir())
	got := make(chan testDenial, 64)
	stop, err := listenDenials(ctx, group, func(hostIf string, idx int, proto string, dst netip.AddrPort) {
		select {
		case got <- testDenial{hostIf, idx, proto, dst}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return group, got
}
