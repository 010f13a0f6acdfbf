package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var (
	// usersLock is held shared by every process that has a Pool open,
	// for as long as it is open; HostCleanup takes it exclusively, so it
	// changes nothing while another Tupper process uses the network.
	usersLock = filepath.Join(runDir, "users.lock")
	// routesRecord lists the subnets whose unreachable route a pool
	// installed (ensureUnreachable), one a line.
	routesRecord = filepath.Join(runDir, "routes.tupper")
)

// HostCleanup leaves the host's network as Tupper found it, when no
// process of Tupper's has a Pool open and no sandbox interface remains
// (of any pool): it removes the nftables table, the pools' unreachable
// routes, the accepts added to the host's firewalls, the records and
// lock files in /run/tupper, and switches IPv4 and IPv6 forwarding back
// off where Tupper turned them on, unless another program has come to
// rely on them (othersForward). Otherwise it changes nothing and says
// why in the report. A daemon's last Pool.Close runs it; so do
// `tupper cleanup` and `tupper doctor --fix`.
//
// With leaveFirewalls the host's own firewalls are not touched: an
// operator who keeps Tupper out of them (--host-firewall=off) added the
// accepts and removes them.
func HostCleanup(ctx context.Context, leaveFirewalls bool) (*CleanupReport, error) {
	rep := &CleanupReport{}
	// Taken even where runDir is gone (a host whose /run was emptied
	// while the table stayed): a daemon that starts meanwhile must wait.
	users, err := flockPath(ctx, usersLock, unix.LOCK_EX, false)
	if errors.Is(err, unix.EWOULDBLOCK) {
		rep.Skipped = "another Tupper process uses the network"
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	defer users()
	unlock, err := lockFile(ctx, firewallLock)
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	defer unlock()
	n, err := sandboxLinks()
	if err != nil {
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	if n > 0 {
		rep.Skipped = fmt.Sprintf("%d sandbox interfaces remain", n)
		return rep, nil
	}

	var errs []error
	if !leaveFirewalls {
		removed, err := removeHostFirewallAccepts(ctx)
		rep.Removed = append(rep.Removed, removed...)
		errs = append(errs, err)
	}
	errs = append(errs, removeTable(ctx, rep))
	errs = append(errs, removeRoutes(rep))
	errs = append(errs, restoreForwarding(ctx, rep))
	if err := errors.Join(errs...); err != nil {
		// The records say what is left to undo: keep them for another
		// try.
		return rep, fmt.Errorf("cleanup: %w", err)
	}
	errs = append(errs, removeRunFiles(rep))
	return rep, errors.Join(errs...)
}

// sandboxLinks counts the host's interfaces that are a sandbox's, of any
// pool: their alias says so.
func sandboxLinks() (int, error) {
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return 0, fmt.Errorf("list links: %w", err)
	}
	n := 0
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Alias, "tupper:") {
			n++
		}
	}
	return n, nil
}

// removeTable deletes Tupper's nftables table, if there is one.
func removeTable(ctx context.Context, rep *CleanupReport) error {
	tables, err := commandOutput(ctx, "nft", "list", "tables")
	if err != nil {
		if _, lerr := exec.LookPath("nft"); lerr != nil {
			return nil // no nft, no table
		}
		return err
	}
	if !slices.Contains(strings.Split(tables, "\n"), "table inet "+firewallTable) {
		return nil
	}
	if err := runNFT(ctx, "delete table inet "+firewallTable+"\n"); err != nil {
		return err
	}
	rep.Removed = append(rep.Removed, "nftables table inet "+firewallTable)
	return nil
}

// recordRoute adds subnet to routesRecord, once.
func recordRoute(subnet netip.Prefix) error {
	b, err := os.ReadFile(routesRecord)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if slices.Contains(strings.Fields(string(b)), subnet.String()) {
		return nil
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(routesRecord, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, subnet)
	return errors.Join(err, f.Close())
}

// removeRoutes deletes the unreachable routes of routesRecord.
func removeRoutes(rep *CleanupReport) error {
	b, err := os.ReadFile(routesRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range strings.Fields(string(b)) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		r := &netlink.Route{Dst: prefixIPNet(p), Type: unix.RTN_UNREACHABLE}
		if err := netlink.RouteDel(r); err != nil {
			if !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("route %s: %w", p, err))
			}
			continue
		}
		rep.Removed = append(rep.Removed, "unreachable route "+p.String())
	}
	return errors.Join(errs...)
}

// restoreForwarding switches off the forwarding that Tupper's records say
// it turned on, and sets back to 1 the accept_ra it raised to 2, unless
// another program relies on forwarding now (othersForward): then it stays
// on, as theirs. The records go either way once done.
func restoreForwarding(ctx context.Context, rep *CleanupReport) error {
	var errs []error
	why, others := "", false
	for _, sw := range []forwardSwitch{ipv4Forwarding, ipv6Forwarding} {
		rec, err := os.ReadFile(sw.record)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why == "" {
			why, others = othersForward(ctx)
		}
		if others {
			rep.Kept = append(rep.Kept, sw.name+" stays on: "+why)
			continue
		}
		if err := os.WriteFile(filepath.Join(procSys, sw.key), []byte("0"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("turn off %s: %w", sw.name, err))
			continue
		}
		rep.Removed = append(rep.Removed, sw.name+" back to 0")
		for _, line := range strings.Split(string(rec), "\n") {
			names, ok := strings.CutPrefix(line, "tupper set accept_ra from 1 to 2 on: ")
			if !ok {
				continue
			}
			for _, name := range strings.Fields(names) {
				path := filepath.Join(procSys, "net/ipv6/conf", name, "accept_ra")
				if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "2" {
					if err := os.WriteFile(path, []byte("1"), 0o644); err == nil {
						rep.Removed = append(rep.Removed, "accept_ra of "+name+" back to 1")
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// foreignForwarders are the kinds of interface that exist to forward:
// software that makes one relies on the host's forwarding.
var foreignForwarders = []string{"bridge", "tun", "tuntap", "wireguard", "vxlan", "geneve", "ipip", "gre", "openvswitch"}

// othersForward reports whether another program relies on the host's
// forwarding, and why: an interface that exists to forward (a bridge
// other than one the host's default route uses, a tunnel, a VPN, an
// overlay), or NAT in a firewall other than Tupper's (a masquerade or
// SNAT rule in another nftables table or in iptables-legacy's nat table).
// It is a judgement from what can be seen: a program that forwards
// without either is not seen, and `sysctl -w` by hand after Tupper's
// start is not either.
func othersForward(ctx context.Context) (string, bool) {
	links, _ := netlink.LinkList()
	uplinks := defaultRouteLinks(netlink.FAMILY_V4, netlink.FAMILY_V6)
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Alias, "tupper:") || !slices.Contains(foreignForwarders, l.Type()) {
			continue
		}
		if l.Type() == "bridge" && slices.ContainsFunc(uplinks, func(u netlink.Link) bool { return u.Attrs().Index == a.Index }) {
			continue // the host's own uplink, as with a bridged NIC
		}
		return fmt.Sprintf("interface %s (%s) forwards for other software", a.Name, l.Type()), true
	}
	if rules, err := commandOutput(ctx, "nft", "list", "ruleset"); err == nil {
		table := ""
		for _, line := range strings.Split(rules, "\n") {
			if t, ok := strings.CutPrefix(line, "table "); ok {
				table = strings.TrimSuffix(t, " {")
				continue
			}
			if table == "inet "+firewallTable {
				continue
			}
			if strings.Contains(line, "masquerade") || strings.Contains(line, " snat ") || strings.Contains(line, "MASQUERADE") || strings.Contains(line, "SNAT") {
				return "table " + table + " translates forwarded addresses", true
			}
		}
	}
	if b, err := os.ReadFile("/proc/net/ip_tables_names"); err == nil && slices.Contains(strings.Fields(string(b)), "nat") {
		if out, err := commandOutput(ctx, "iptables-legacy-save", "-t", "nat"); err == nil &&
			(strings.Contains(out, "MASQUERADE") || strings.Contains(out, "SNAT")) {
			return "iptables-legacy's nat table translates forwarded addresses", true
		}
	}
	return "", false
}

// removeRunFiles removes Tupper's network records and lock files from
// runDir, and runDir itself once empty. The caller holds usersLock and
// firewallLock; lockFile takes a lock again when its file went meanwhile.
func removeRunFiles(rep *CleanupReport) error {
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	n := 0
	for _, e := range entries {
		name := e.Name()
		ours := strings.HasPrefix(name, "netpool-") && strings.Contains(name, ".lock") ||
			strings.HasSuffix(name, ".tupper") ||
			name == filepath.Base(firewallLock) || name == filepath.Base(usersLock)
		if !ours || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(runDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		// The two locks this cleanup holds are not worth a word: it
		// made them itself when they were not there.
		if name != filepath.Base(firewallLock) && name != filepath.Base(usersLock) {
			n++
		}
	}
	if n > 0 {
		rep.Removed = append(rep.Removed, fmt.Sprintf("%d records and lock files in %s", n, runDir))
	}
	if err := os.Remove(runDir); err == nil {
		rep.Removed = append(rep.Removed, runDir)
	}
	return errors.Join(errs...)
}

// HostLeftovers lists what Tupper left on the host's network that
// HostCleanup would remove, or reports inUse when a process of Tupper's
// has a Pool open (then nothing is left over: it is in use). It changes
// nothing.
func HostLeftovers(ctx context.Context) (left []string, inUse bool, err error) {
	if _, serr := os.Stat(usersLock); serr == nil {
		probe, err := flockPath(ctx, usersLock, unix.LOCK_EX, false)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		defer probe()
	}
	if tables, err := commandOutput(ctx, "nft", "list", "tables"); err == nil &&
		slices.Contains(strings.Split(tables, "\n"), "table inet "+firewallTable) {
		left = append(left, "nftables table inet "+firewallTable)
	}
	if n, err := sandboxLinks(); err == nil && n > 0 {
		left = append(left, fmt.Sprintf("%d sandbox interfaces", n))
	}
	for _, rec := range []string{ipForwardRecord, ipv6ForwardRecord} {
		if ok, _ := exists(rec); ok {
			left = append(left, "record "+rec+" (forwarding Tupper turned on)")
		}
	}
	if b, err := os.ReadFile(routesRecord); err == nil && len(strings.Fields(string(b))) > 0 {
		left = append(left, "unreachable routes of "+strings.Join(strings.Fields(string(b)), ", "))
	}
	locks, _ := filepath.Glob(filepath.Join(runDir, "netpool-*.lock*"))
	if len(locks) > 0 {
		left = append(left, fmt.Sprintf("%d address lock files in %s", len(locks), runDir))
	}
	return left, false, nil
}
