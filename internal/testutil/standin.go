package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The stand-in host's addresses. Both namespaces are the test's own, so
// the documentation range they come from is free there whatever the
// machine's own namespace uses.
var (
	// StandInWorld is the fake internet's web server, on :80, in the
	// world namespace; StandInWorld6 is the same server over IPv6.
	StandInWorld  = netip.MustParseAddr("198.51.100.20")
	StandInWorld6 = netip.MustParseAddr("2001:db8::20")
	// standInUplink is the host's side of its uplink, and standInGateway
	// the world's.
	standInUplink   = netip.MustParsePrefix("198.51.100.201/30")
	standInGateway  = netip.MustParsePrefix("198.51.100.202/30")
	standInUplink6  = netip.MustParsePrefix("2001:db8:ffff:ffff::1/64")
	standInGateway6 = netip.MustParsePrefix("2001:db8:ffff:ffff::2/64")
)

// StandInUplink is the name of the stand-in host's uplink.
const StandInUplink = "uplink0"

var standInCount atomic.Int64

// StandInHost is a network namespace that plays a whole host for a test,
// so that the test may change what must never change in the machine's
// own namespace (the FORWARD policy, ufw, firewalld, Docker's rules): its
// own uplink, IPv4 and IPv6, to a fake internet (another namespace whose
// web server at StandInWorld and StandInWorld6 answers "world"), its own firewall and sysctls (IPv4
// forwarding starts off, as on a host that is no router), and a mount
// namespace of its own with a fresh /run, a /sys of its network namespace
// (cgroups kept) and whatever Bind adds. Every command run through
// Command shares that mount namespace, as the programs of one host share
// its files. Nothing in it reaches beyond its two namespaces.
type StandInHost struct {
	// NS is the network namespace's name under /run/netns.
	NS string
	// Dir is the test's directory for the host's files.
	Dir string

	world     string // the world namespace's name
	holder    *exec.Cmd
	holderPID int // the process whose mount namespace is the host's
}

// NewStandInHost makes a stand-in host and removes it when t ends. Each
// path of shadow (a directory or file, e.g. /etc/ufw) is copied, and the
// copy bound over it in the host's mount namespace, so that what the
// host's programs write there stays in the test. It skips t unless it
// runs as root on Linux.
func NewStandInHost(t testing.TB, shadow ...string) *StandInHost {
	t.Helper()
	if runtime.GOOS != "linux" {
		Skip(t, "a stand-in host needs Linux network namespaces")
	}
	RequiresRoot(t)
	for _, tool := range []string{"nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			Skip(t, tool+" is missing (util-linux)")
		}
	}
	removeStaleStandIns(t)
	n := standInCount.Add(1)
	h := &StandInHost{
		NS:    fmt.Sprintf("tupper-host-%d-%d", os.Getpid(), n),
		world: fmt.Sprintf("tupper-world-%d-%d", os.Getpid(), n),
		Dir:   t.TempDir(),
	}
	hostNS := h.namespace(t, h.NS)
	worldNS := h.namespace(t, h.world)
	if err := h.link(hostNS, worldNS); err != nil {
		t.Fatalf("stand-in host: %v", err)
	}
	if err := inNetNS(hostNS, func() error {
		// A host that is no router: forwarding off, whatever the
		// machine's namespace (whose IPv4 settings a new one inherits)
		// says.
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0"), 0o644)
	}); err != nil {
		t.Fatalf("stand-in host: %v", err)
	}
	h.serveWorld(t, worldNS)
	h.startHolder(t, shadow)
	return h
}

// namespace makes the named network namespace and removes it at cleanup.
func (h *StandInHost) namespace(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	type result struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with us
		ns, err := netns.NewNamed(name)
		c <- result{ns, err}
	}()
	r := <-c
	if r.err != nil {
		t.Fatalf("stand-in host: netns %s: %v", name, r.err)
	}
	t.Cleanup(func() {
		r.ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("stand-in host: remove netns %s: %v", name, err)
		}
	})
	return r.ns
}

// link joins the host to the world: a veth pair, the host's default route
// through the world, the world's server address on its lo.
func (h *StandInHost) link(hostNS, worldNS netns.NsHandle) error {
	hh, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		return err
	}
	defer hh.Close()
	wh, err := netlink.NewHandleAt(worldNS)
	if err != nil {
		return err
	}
	defer wh.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: StandInUplink}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(worldNS))}
	if err := hh.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	for _, side := range []struct {
		h     *netlink.Handle
		name  string
		addrs []netip.Prefix
	}{
		{hh, StandInUplink, []netip.Prefix{standInUplink, standInUplink6}},
		{wh, "eth0", []netip.Prefix{standInGateway, standInGateway6}},
		{hh, "lo", nil},
		{wh, "lo", []netip.Prefix{netip.PrefixFrom(StandInWorld, 32), netip.PrefixFrom(StandInWorld6, 128)}},
	} {
		l, err := side.h.LinkByName(side.name)
		if err != nil {
			return err
		}
		for _, a := range side.addrs {
			// No duplicate address detection: the link is the test's.
			if err := side.h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(a), Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("address %s: %w", a, err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return err
		}
	}
	up, err := hh.LinkByName(StandInUplink)
	if err != nil {
		return err
	}
	if err := hh.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: standInGateway.Addr().AsSlice()}); err != nil {
		return err
	}
	return hh.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: standInGateway6.Addr().AsSlice(),
		Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}})
}

// serveWorld answers HTTP on StandInWorld:80 with "world", and the
// client's address on the next line.
func (h *StandInHost) serveWorld(t testing.TB, worldNS netns.NsHandle) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "world\n%s\n", r.RemoteAddr)
	}), ReadHeaderTimeout: 10 * time.Second}
	t.Cleanup(func() { srv.Close() })
	for _, a := range []netip.Addr{StandInWorld, StandInWorld6} {
		var ln net.Listener
		if err := inNetNS(worldNS, func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(a, 80).String())
			return err
		}); err != nil {
			t.Fatalf("stand-in host: world server: %v", err)
		}
		go srv.Serve(ln)
	}
}

// startHolder starts the process that holds the host's mount namespace
// for the test's life, with a fresh /run, a /sys of the host's network
// namespace (the cgroup mounts kept) and the shadow binds.
func (h *StandInHost) startHolder(t testing.TB, shadow []string) {
	t.Helper()
	var script strings.Builder
	script.WriteString(`set -e
d=$(mktemp -d); mount --rbind /sys/fs/cgroup "$d"; mount -t sysfs sysfs /sys; mount --rbind "$d" /sys/fs/cgroup; umount -l "$d"; rmdir "$d"
mount -t tmpfs -o mode=755 tmpfs /run
`)
	for i, path := range shadow {
		copyTo := filepath.Join(h.Dir, "shadow", strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Dir(copyTo), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", path, copyTo).CombinedOutput(); err != nil {
			t.Fatalf("stand-in host: copy %s: %v: %s", path, err, out)
		}
		fmt.Fprintf(&script, "mount --bind %q %q\n", copyTo, path)
	}
	readyFile := filepath.Join(h.Dir, "ready")
	fmt.Fprintf(&script, "touch %q\nexec sleep infinity\n", readyFile)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+h.NS, "unshare", "-m", "--propagation", "private", "sh", "-c", script.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("stand-in host: %v", err)
	}
	h.holder = cmd
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(readyFile); err == nil {
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("stand-in host: mount namespace not ready: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// nsenter, unshare (without --fork) and sh each exec the next, and
	// sh execs sleep: one process throughout, in the host's mount
	// namespace. (Its children were the mount commands and touch.)
	h.holderPID = cmd.Process.Pid
}

// Command returns cmd name args run on the host: in its network and mount
// namespaces.
func (h *StandInHost) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	all := append([]string{"--mount=/proc/" + strconv.Itoa(h.holderPID) + "/ns/mnt", "--net=/run/netns/" + h.NS, "--", name}, args...)
	return exec.CommandContext(ctx, "nsenter", all...)
}

// Run runs name args on the host and returns its output, failing t if it
// fails.
func (h *StandInHost) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := h.Try(name, args...)
	if err != nil {
		t.Fatalf("on the stand-in host: %v", err)
	}
	return out
}

// Try runs name args on the host, within a minute, and returns its
// standard output; the error holds what it printed to standard error.
func (h *StandInHost) Try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := h.Command(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out), nil
}

// RunInWorld runs name args in the fake internet's namespace, a neighbour
// of the host on its uplink, and returns its output and error.
func (h *StandInHost) RunInWorld(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + h.world, "--", name}, args...)...).CombinedOutput()
	return string(out), err
}

// UplinkAddr is the host's address on its uplink, which the world routes
// to.
func (h *StandInHost) UplinkAddr() netip.Addr { return standInUplink.Addr() }

// Path returns where the host's path (under its own /run, say) is seen
// from the test's mount namespace.
func (h *StandInHost) Path(path string) string {
	return filepath.Join("/proc", strconv.Itoa(h.holderPID), "root", path)
}

// Dial connects to addr from inside the host, as its own programs do: a
// DialContext for an http.Transport that reaches the host's loopback.
func (h *StandInHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ns, err := netns.GetFromName(h.NS)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var c net.Conn
	err = inNetNS(ns, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Sysctl reads a sysctl of the host, e.g. "net/ipv4/ip_forward". It is
// read by a process on the host: /proc/sys/net shows the network
// namespace of whoever reads it.
func (h *StandInHost) Sysctl(t testing.TB, key string) string {
	t.Helper()
	return strings.TrimSpace(h.Run(t, "cat", "/proc/sys/"+key))
}

// removeStaleStandIns removes the namespaces of stand-in hosts whose test
// process died before its cleanup (killed by a timeout, say), and ends
// the programs still running in them: their daemons, dockerd, firewalld.
func removeStaleStandIns(t testing.TB) {
	t.Helper()
	names, _ := filepath.Glob("/run/netns/tupper-[hw]*-*-*")
	for _, path := range names {
		f := strings.Split(filepath.Base(path), "-")
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil || (f[1] != "host" && f[1] != "world") {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue // its test still runs
		}
		var ns unix.Stat_t
		if unix.Stat(path, &ns) != nil {
			continue
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
		for _, p := range procs {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && st.Ino == ns.Ino && st.Dev == ns.Dev {
				if victim, err := strconv.Atoi(strings.Split(p, "/")[2]); err == nil {
					unix.Kill(victim, unix.SIGKILL)
				}
			}
		}
		if err := netns.DeleteNamed(filepath.Base(path)); err != nil {
			t.Logf("stand-in host: remove the stale namespace %s: %v", path, err)
		}
	}
}
