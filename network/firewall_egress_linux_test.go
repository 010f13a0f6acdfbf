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
)

// testLink is a network namespace the test made, joined to the host by a
// veth pair: the host side carries hostAddr (.1 of a /30), eth0 inside
// carries addr (.2).
type testLink struct {
	ns       string
	hostIf   string
	hostAddr netip.Prefix
	addr     netip.Prefix
	slot     int
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

	// Pick a free /30 under the subnet's lock, as the pool does, so that
	// concurrent tests never share one.
	unlock, err := lockFile(context.Background(), DefaultLockPath(subnet))
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
	total := slots(subnet)
	start := mathrand.IntN(total)
	l.slot = -1
	for i := range total {
		if n := (start + i) % total; !taken[n] {
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
	guard := strings.Contains(string(out), "iifname != @sbxif oifname != @sbxif drop")
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
	l := makeTestLink(t, "tzs", testSandboxNet)
	if err := enableEgressSysctls(l.hostIf); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"forwarding": "1", "route_localnet": "1", "rp_filter": "1"} {
		path := "/proc/sys/net/ipv4/conf/" + l.hostIf + "/" + key
		if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q, %v; want %s", path, b, err, want)
		}
	}
	if err := enableEgressSysctls("../all"); err == nil {
		t.Error("enableEgressSysctls accepted a path")
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
		if want := []string{ruleAlwaysDenied, ruleIPv6}; !slices.Equal(names, want) {
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
		group := logGroupFor(t.TempDir())
		type denial struct {
			hostIf string
			idx    int
			proto  string
			dst    netip.AddrPort
		}
		got := make(chan denial, 64)
		stop, err := listenDenials(ctx, group, func(hostIf string, idx int, proto string, dst netip.AddrPort) {
			select {
			case got <- denial{hostIf, idx, proto, dst}:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
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
		stop()
		stop()
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
}
