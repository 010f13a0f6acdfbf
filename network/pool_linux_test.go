package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// Tests here send traffic only between the host and namespaces they made.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root to make network namespaces and veth pairs")
	}
}

func newTestPool(t *testing.T, policy Policy) *Pool {
	t.Helper()
	return newTestPoolAt(t, t.TempDir(), policy)
}

func newTestPoolAt(t *testing.T, dir string, policy Policy) *Pool {
	t.Helper()
	requireRoot(t)
	p, err := New(Config{Dir: dir, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, _ := p.List(context.Background())
		for _, id := range ids {
			p.Teardown(context.Background(), id)
		}
	})
	return p
}

// uniqueID returns an id no other test process uses at the same time.
func uniqueID(name string) string {
	return fmt.Sprintf("nt-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e6)
}

// inNetNS runs f on a thread in the namespace at path. The thread is thrown
// away afterwards.
func inNetNS(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// serveEcho listens on addr:0 inside the namespace at path and answers each
// connection with one line.
func serveEcho(t *testing.T, path string, addr string) string {
	t.Helper()
	return listenIn(t, path, addr, func(c net.Conn) { fmt.Fprintln(c, "hello") }).String()
}

func dialHello(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "hello\n" {
		return fmt.Errorf("got %q", line)
	}
	return nil
}

func isMountPoint(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// assertGone fails t if anything of sandbox id is left in p.
func assertGone(t *testing.T, p *Pool, id string) {
	t.Helper()
	if _, err := os.Lstat(p.NetNSPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns file of %s left: %v", id, err)
	}
	if isMountPoint(t, p.NetNSPath(id)) {
		t.Errorf("netns mount of %s left", id)
	}
	if _, err := os.Lstat(p.leasePath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease of %s left: %v", id, err)
	}
	if _, err := netlink.LinkByName(p.hostIf(id)); err == nil {
		t.Errorf("veth %s of %s left", p.hostIf(id), id)
	}
	ids, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range ids {
		if got == id {
			t.Errorf("List still reports %s", id)
		}
	}
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}

func TestSetupTeardown(t *testing.T) {
	p := newTestPool(t, nil)
	ctx := context.Background()
	id := uniqueID("basic")

	ep, err := p.Setup(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Subnet().Contains(ep.SandboxAddr.Addr()) || ep.SandboxAddr.Bits() != 30 {
		t.Errorf("sandbox address %s is not a /30 of %s", ep.SandboxAddr, p.Subnet())
	}
	if ep.SandboxAddr.Addr() != ep.HostAddr.Addr().Next() {
		t.Errorf("host %s and sandbox %s are not .1 and .2 of one /30", ep.HostAddr, ep.SandboxAddr)
	}
	if !isMountPoint(t, ep.NetNSPath) {
		t.Errorf("%s is not a mount point", ep.NetNSPath)
	}
	got, err := p.Lookup(id)
	if err != nil || *got != *ep {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, ep)
	}
	ids, err := p.List(ctx)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v; want [%s]", ids, err, id)
	}

	// The host side is addressed, up, and forwards nothing.
	link, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("%s is down", ep.HostIf)
	}
	for _, s := range []struct{ path, want string }{
		{"/proc/sys/net/ipv4/conf/" + ep.HostIf + "/forwarding", "0"},
		{"/proc/sys/net/ipv4/conf/" + ep.HostIf + "/rp_filter", "1"},
		{"/proc/sys/net/ipv6/conf/" + ep.HostIf + "/disable_ipv6", "1"},
	} {
		if b, err := os.ReadFile(s.path); err != nil || strings.TrimSpace(string(b)) != s.want {
			t.Errorf("%s = %q, %v; want %s", s.path, b, err, s.want)
		}
	}

	// Inside: lo and eth0 up, the address, a default route via the host.
	err = inNetNS(ep.NetNSPath, func() error {
		eth, err := netlink.LinkByName(SandboxIfName)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(eth, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != ep.SandboxAddr.String() {
			return fmt.Errorf("eth0 addresses %v, want only %s", addrs, ep.SandboxAddr)
		}
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if isDefault(r.Dst) && r.Gw.String() == ep.HostAddr.Addr().String() {
				return nil
			}
		}
		return fmt.Errorf("no default route via %s in %v", ep.HostAddr.Addr(), routes)
	})
	if err != nil {
		t.Error(err)
	}

	// The host reaches a server in the namespace at the sandbox address.
	if err := dialHello(serveEcho(t, ep.NetNSPath, ep.SandboxAddr.Addr().String())); err != nil {
		t.Errorf("host to sandbox: %v", err)
	}
	// So does the sandbox its own loopback.
	lo := serveEcho(t, ep.NetNSPath, "127.0.0.1")
	if err := inNetNS(ep.NetNSPath, func() error { return dialHello(lo) }); err != nil {
		t.Errorf("loopback in the sandbox: %v", err)
	}

	if _, err := p.Setup(ctx, id, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Setup = %v, want ErrAlreadyExists", err)
	}

	if err := p.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p, id)
	if err := p.Teardown(ctx, id); err != nil {
		t.Errorf("second Teardown = %v, want nil", err)
	}
	if _, err := p.Lookup(id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Lookup after Teardown = %v, want ErrNotFound", err)
	}
}

func TestSandboxesCannotReachEachOther(t *testing.T) {
	p := newTestPool(t, nil)
	ctx := context.Background()
	a, err := p.Setup(ctx, uniqueID("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Setup(ctx, uniqueID("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	target := serveEcho(t, b.NetNSPath, b.SandboxAddr.Addr().String())
	if err := dialHello(target); err != nil {
		t.Fatalf("host to b: %v", err)
	}
	err = inNetNS(a.NetNSPath, func() error {
		c, err := net.DialTimeout("tcp", target, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Errorf("sandbox a reached sandbox b at %s", target)
	}
}

// failingPolicy fails Apply and counts Remove calls.
type failingPolicy struct {
	mu      sync.Mutex
	removed int
}

func (f *failingPolicy) Apply(ctx context.Context, ep *Endpoint) error {
	return errors.New("policy refused")
}

func (f *failingPolicy) Remove(ctx context.Context, ep *Endpoint) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed++
	return nil
}

func TestFailedSetupLeavesNothing(t *testing.T) {
	pol := &failingPolicy{}
	p := newTestPool(t, pol)
	id := uniqueID("fail")
	if _, err := p.Setup(context.Background(), id, nil); err == nil {
		t.Fatal("Setup with a failing policy succeeded")
	}
	assertGone(t, p, id)
	if pol.removed != 1 {
		t.Errorf("policy removed %d times, want 1", pol.removed)
	}
}

func TestListFindsLeftovers(t *testing.T) {
	p := newTestPool(t, nil)
	ctx := context.Background()
	id := uniqueID("crash")
	ep, err := p.Setup(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A crash between steps may lose the lease; the namespace and the veth
	// still name the id.
	if err := os.Remove(p.leasePath(id)); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v; want [%s]", ids, err, id)
	}
	if err := removeNetNS(ep.NetNSPath); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List with only the veth left = %v, %v; want [%s]", ids, err, id)
	}
	if err := p.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p, id)
}

// poolDirs returns two pool directories whose home blocks in the default
// subnet are the same (same) or differ.
func poolDirs(t *testing.T, same bool) (string, string) {
	t.Helper()
	base := t.TempDir()
	a := filepath.Join(base, "p0")
	for i := 1; ; i++ {
		b := filepath.Join(base, fmt.Sprint("p", i))
		if (homeBlock(DefaultSubnet, a) == homeBlock(DefaultSubnet, b)) == same {
			return a, b
		}
	}
}

// TestConcurrentSetup runs Setups of two pools of the same subnet, and the
// same home block, at once. The pools open the lock file separately, as two
// processes would, so this checks the cross-process allocation too.
func TestConcurrentSetup(t *testing.T) {
	a, b := poolDirs(t, true)
	pools := []*Pool{newTestPoolAt(t, a, nil), newTestPoolAt(t, b, nil)}
	ctx := context.Background()
	const perPool = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		eps  []*Endpoint
		errs []error
	)
	for i, p := range pools {
		for j := range perPool {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ep, err := p.Setup(ctx, uniqueID(fmt.Sprintf("c%d-%d", i, j)), nil)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				eps = append(eps, ep)
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	seen := map[string]string{}
	for _, ep := range eps {
		if other, dup := seen[ep.SandboxAddr.String()]; dup {
			t.Errorf("%s and %s both got %s", other, ep.ID, ep.SandboxAddr)
		}
		seen[ep.SandboxAddr.String()] = ep.ID
	}
	for _, p := range pools {
		ids, err := p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.Teardown(ctx, id); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			assertGone(t, p, id)
		}
	}
}

func TestSetupHonoursContext(t *testing.T) {
	p := newTestPool(t, nil)
	// Hold the lock of the pool's home block so that Setup has to wait
	// for it.
	unlock, err := lockFile(context.Background(), blockLockPath(p.cfg.LockPath, homeBlock(p.cfg.Subnet, p.cfg.Dir)))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	id := uniqueID("ctx")
	if _, err := p.Setup(ctx, id, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Setup under a held lock = %v, want DeadlineExceeded", err)
	}
	assertGone(t, p, id)
}

// TestPoolsOfOtherRootsDoNotWait checks that a pool kept under another
// directory (another daemon's state root) picks addresses while this one's
// lock is held, as by a daemon stuck in the middle of a pick, and that the
// stuck one does wait.
func TestPoolsOfOtherRootsDoNotWait(t *testing.T) {
	a, b := poolDirs(t, false)
	stuck, free := newTestPoolAt(t, a, nil), newTestPoolAt(t, b, nil)
	unlock, err := lockFile(context.Background(), blockLockPath(stuck.cfg.LockPath, homeBlock(stuck.cfg.Subnet, stuck.cfg.Dir)))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := stuck.Setup(ctx, uniqueID("stuck"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Setup of the pool whose lock is held = %v, want it to wait (DeadlineExceeded)", err)
	}
	// No deadline worth the name: the other pool must not need the lock.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 3 {
		ep, err := free.Setup(ctx, uniqueID(fmt.Sprint("free", i)), nil)
		if err != nil {
			t.Fatalf("Setup of another root's pool while the first one's lock is held: %v", err)
		}
		if n, _ := slotOf(DefaultSubnet, ep.SandboxAddr.Addr()); n/blockSlots != homeBlock(DefaultSubnet, free.cfg.Dir) {
			t.Errorf("%s got %s, outside its home block %d", ep.ID, ep.SandboxAddr, homeBlock(DefaultSubnet, free.cfg.Dir))
		}
	}
}

func TestNetNSDirStaysClean(t *testing.T) {
	p := newTestPool(t, nil)
	ctx := context.Background()
	for i := range 5 {
		id := uniqueID(fmt.Sprint("cycle", i))
		if _, err := p.Setup(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
		if err := p.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{p.netnsDir, p.leaseDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("%s holds %d entries after teardown", filepath.Base(dir), len(entries))
		}
	}
}

func TestStaleAddressIsUnreachable(t *testing.T) {
	p := newTestPool(t, nil)
	id := uniqueID("stale")
	ep, err := p.Setup(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Teardown(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// The sandbox is gone: the host must answer for its address itself
	// rather than route the packet anywhere.
	routes, err := netlink.RouteGet(ep.SandboxAddr.Addr().AsSlice())
	if err != nil {
		if !errors.Is(err, unix.EHOSTUNREACH) && !errors.Is(err, unix.ENETUNREACH) {
			t.Fatalf("route lookup for a stale sandbox address: %v, want unreachable", err)
		}
		return
	}
	t.Fatalf("a stale sandbox address %s still routes via %+v", ep.SandboxAddr.Addr(), routes)
}

// TestSandboxCannotReachHost checks that a sandbox reaches no service of
// the host, on the host side of its veth or any other host address, while
// the host still reaches the sandbox.
func TestSandboxCannotReachHost(t *testing.T) {
	p := newTestPool(t, nil)
	id := uniqueID("nohost")
	ep, err := p.Setup(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A host service on every address.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hostSide := net.JoinHostPort(ep.HostAddr.Addr().String(), fmt.Sprint(port))
	if err := dialHello(hostSide); err != nil {
		t.Fatalf("the host itself cannot reach its service at %s: %v", hostSide, err)
	}
	err = inNetNS(ep.NetNSPath, func() error { return dialHello(hostSide) })
	if err == nil {
		t.Errorf("the sandbox reached a host service at %s", hostSide)
	}
	// The host still reaches a server in the sandbox.
	inside := serveEcho(t, ep.NetNSPath, ep.SandboxAddr.Addr().String())
	if err := dialHello(inside); err != nil {
		t.Errorf("the host cannot reach the sandbox at %s: %v", inside, err)
	}
}

// TestSetupIPv6 checks the IPv6 side of a pool that gives sandboxes IPv6:
// the n-th /126 beside the n-th /30, addressed at once (no duplicate
// address detection), a default route via the host side, and a path from
// the host to the sandbox.
func TestSetupIPv6(t *testing.T) {
	requireRoot(t)
	p, err := New(Config{Dir: t.TempDir(), IPv6Subnet: netip.MustParsePrefix("fd74:7570:7065:ff00::/64")})
	if err != nil {
		t.Fatal(err)
	}
	id := uniqueID("v6")
	ctx := context.Background()
	ep, err := p.Setup(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Teardown(context.Background(), id) })
	n, _ := slotOf(p.Subnet(), ep.SandboxAddr.Addr())
	host6, sb6 := slot6(netip.MustParsePrefix("fd74:7570:7065:ff00::/64"), n)
	if ep.HostAddr6 != host6 || ep.SandboxAddr6 != sb6 || sb6.Addr() != host6.Addr().Next() {
		t.Fatalf("IPv6 addresses %s, %s; want %s, %s", ep.HostAddr6, ep.SandboxAddr6, host6, sb6)
	}
	if got, err := p.Lookup(id); err != nil || got.SandboxAddr6 != ep.SandboxAddr6 {
		t.Errorf("the lease lost the IPv6 address: %+v, %v", got, err)
	}
	err = inNetNS(ep.NetNSPath, func() error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(net.IP(ep.HostAddr6.Addr().AsSlice())) {
				return nil
			}
		}
		return fmt.Errorf("no default IPv6 route via %s in %v", ep.HostAddr6.Addr(), routes)
	})
	if err != nil {
		t.Error(err)
	}
	if err := dialHello(serveEcho(t, ep.NetNSPath, ep.SandboxAddr6.Addr().String())); err != nil {
		t.Errorf("host to sandbox over IPv6: %v", err)
	}
	// Without IPv6Subnet nothing of IPv6 is set up.
	p4 := newTestPool(t, nil)
	ep4, err := p4.Setup(ctx, uniqueID("v4"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ep4.SandboxAddr6.IsValid() {
		t.Errorf("an IPv4 pool gave IPv6 address %s", ep4.SandboxAddr6)
	}
}
