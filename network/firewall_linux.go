package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// firewallTable is the nftables table that holds Tupper's rules. It is
// Tupper's own, so installing it never disturbs anyone else's rules. Every
// pool on the host shares it.
const firewallTable = "tupper"

// Names in firewallTable. nft reserves "fwd", hence the longer map names.
const (
	// sandboxIfSet holds a wildcard ("tp*") per interface prefix in use
	// on the host, so that pools of different prefixes share one rule set.
	sandboxIfSet = "sbxif"
	// forwardMap sends a sandbox's forwarded packets to its filter chain.
	forwardMap = "sbxfwd"
	// preroutingMap sends a sandbox's new flows to its NAT chain.
	preroutingMap = "sbxpre"
	// redirectedFlows counts, per sandbox interface, the flows redirected
	// to this host's resolver and egress proxy.
	redirectedFlows = "sbxredir"
)

// maxRedirectedFlows is how many flows (DNS queries, proxied connections)
// one sandbox may have open to the host's resolver and egress proxy at
// once. They never reach the forward chain's cap, and without this one a
// sandbox could fill the connection tracking table that the host and
// every sandbox share.
const maxRedirectedFlows = 2048

// runDir holds the host-wide state of every Tupper daemon: locks and the
// records of who turned IPv4 and IPv6 forwarding on.
const runDir = "/run/tupper"

// procSys is where sysctls are read and written.
const procSys = "/proc/sys"

var (
	// ipForwardRecord exists when Tupper turned net.ipv4.ip_forward on.
	// While it does, the forward chain refuses to route between two
	// interfaces that are not sandboxes', so the host does not become a
	// router for anybody else because of us. /run is cleared at boot, as
	// the sysctl is.
	ipForwardRecord = filepath.Join(runDir, "ip_forward.tupper")
	// ipv6ForwardRecord is the same for net.ipv6.conf.all.forwarding; it
	// also lists the interfaces whose accept_ra Tupper raised from 1 to 2.
	ipv6ForwardRecord = filepath.Join(runDir, "ipv6_forwarding.tupper")
	// firewallLock serialises installs of the base rule set and the
	// forwarding switch across processes.
	firewallLock = filepath.Join(runDir, "firewall.lock")
)

// firewallRules returns the base rule set, the part shared by every pool
// and sandbox on the host, for host-side interfaces named prefix*.
//
//   - input: a sandbox may answer what the host opened (the engine's calls
//     to its agent) and reach the host's DNS server and egress proxy on
//     127.0.0.1 through its own prerouting DNAT; anything else it sends to
//     the host is refused at once (TCP reset, ICMP admin-prohibited).
//     Without this a sandbox could reach every service the host listens
//     on, since Linux delivers packets for any of its own addresses
//     whatever interface they come in on.
//   - forward: nothing is opened into a sandbox, only replies pass; a
//     sandbox's packets go, through the forwardMap verdict map, to its own
//     chain, which holds its egress policy and is evaluated on every
//     packet. A sandbox without a chain (no egress) is refused everything.
//     Outgoing SYNs get their MSS clamped to the route's MTU, since the
//     veth's MTU may be larger than the uplink's.
//   - nat: a sandbox's new flows go through its own prerouting chain
//     (DNS and proxy redirects); forwarded flows leaving the host are
//     masqueraded.
//
// The table is of the inet family and, but for the DNAT to 127.0.0.1 and
// neighbour discovery, no rule names a family: each holds for IPv4 and
// IPv6 alike, the MSS clamp and masquerade among them.
//
// guard4 and guard6 add a rule that drops forwarding between two
// interfaces that are not sandboxes', for IPv4 and for IPv6: each is set
// when Tupper turned that family's forwarding on (see ensureEgressBase and
// ensureIPv6Forwarding). The rules keep sandboxes isolated even when
// something else (Docker, a VPN) turns forwarding on.
//
// The file is idempotent: chains are flushed and refilled, maps and
// per-sandbox chains are left alone, and the prefix set only grows. An
// empty prefix adds none to it.
func firewallRules(prefix string, guard4, guard6 bool) string {
	var b strings.Builder
	w := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	t := "inet " + firewallTable
	w("add table %s", t)
	w("add set %s %s { type ifname; flags interval; }", t, sandboxIfSet)
	if prefix != "" {
		w(`add element %s %s { "%s*" }`, t, sandboxIfSet, prefix)
	}
	w("add map %s %s { type ifname : verdict; }", t, forwardMap)
	w("add map %s %s { type ifname : verdict; }", t, preroutingMap)
	w("add set %s %s { type ifname; flags dynamic; }", t, redirectedFlows)
	w("add chain %s refuse", t)
	w("add chain %s input { type filter hook input priority filter; policy accept; }", t)
	w("add chain %s forward { type filter hook forward priority filter; policy accept; }", t)
	w("add chain %s prerouting { type nat hook prerouting priority dstnat; policy accept; }", t)
	w("add chain %s postrouting { type nat hook postrouting priority srcnat; policy accept; }", t)
	for _, c := range []string{"refuse", "input", "forward", "prerouting", "postrouting"} {
		w("flush chain %s %s", t, c)
	}
	sbx := "@" + sandboxIfSet
	w("add rule %s refuse meta l4proto tcp reject with tcp reset", t)
	w("add rule %s refuse reject with icmpx admin-prohibited", t)

	w("add rule %s input iifname %s ct state established,related accept", t, sbx)
	w("add rule %s input iifname %s ct state new add @%s { iifname ct count over %d } goto refuse", t, sbx, redirectedFlows, maxRedirectedFlows)
	w("add rule %s input iifname %s ct status dnat ip daddr 127.0.0.1 accept", t, sbx)
	// IPv6 neighbour discovery, which IPv4's ARP needs no rule for: without
	// it the host cannot find a sandbox's IPv6 address on its veth.
	w("add rule %s input iifname %s icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept", t, sbx)
	w("add rule %s input iifname %s goto refuse", t, sbx)

	w("add rule %s forward oifname %s ct state established,related accept", t, sbx)
	w("add rule %s forward iifname %s oifname %s goto refuse", t, sbx, sbx)
	w("add rule %s forward oifname %s drop", t, sbx)
	w("add rule %s forward iifname %s tcp flags syn tcp option maxseg size set rt mtu", t, sbx)
	w("add rule %s forward iifname %s iifname vmap @%s", t, sbx, forwardMap)
	w("add rule %s forward iifname %s goto refuse", t, sbx)
	guard := ""
	switch {
	case guard4 && guard6:
		guard = " " // no family: both
	case guard4:
		guard = " meta nfproto ipv4 "
	case guard6:
		guard = " meta nfproto ipv6 "
	}
	if guard != "" {
		w("add rule %s forward%siifname != %s oifname != %s drop", t, guard, sbx, sbx)
	}

	w("add rule %s prerouting iifname %s iifname vmap @%s", t, sbx, preroutingMap)
	w("add rule %s postrouting iifname %s oifname != %s masquerade", t, sbx, sbx)
	return b.String()
}

// ensureFirewall installs the base rule set once per pool. It leaves
// forwarding as it is: a pool without egress needs none.
func (p *Pool) ensureFirewall(ctx context.Context) error {
	p.fwMu.Lock()
	defer p.fwMu.Unlock()
	if p.fwDone {
		return nil
	}
	if err := checkIfPrefix(p.cfg.IfPrefix); err != nil {
		return err
	}
	if err := installBase(ctx, p.cfg.IfPrefix, nil); err != nil {
		return err
	}
	p.fwDone = true
	return nil
}

// ensureEgressBase installs the base rule set for interfaces named prefix*
// and turns IPv4 forwarding on. When forwarding was off, it records that it
// turned it on (ipForwardRecord) and installs the guard rule before doing
// so; when it was already on, somebody else's forwarding is left alone.
// It is idempotent and safe to call from several processes at once.
func ensureEgressBase(ctx context.Context, prefix string) error {
	if err := checkIfPrefix(prefix); err != nil {
		return err
	}
	return installBase(ctx, prefix, &ipv4Forwarding)
}

// ensureIPv6Forwarding turns IPv6 forwarding (net.ipv6.conf.all.forwarding)
// on, with the care ensureEgressBase takes of IPv4's: when it was off, it
// records that it turned it on (ipv6ForwardRecord) and installs the guard
// rule for IPv6 before doing so; when it was already on, somebody else's
// forwarding is left alone. Call it after ensureEgressBase, and only when
// sandboxes get IPv6.
//
// Forwarding on makes Linux ignore router advertisements on interfaces
// whose accept_ra is 1, and a host that learnt its IPv6 default route from
// them would lose it when it expires. So before turning forwarding on, it
// sets accept_ra to 2 (accept even when forwarding) wherever it was 1,
// "default" among them, and lists those interfaces in the record; 0 and 2
// are left alone.
//
// It is idempotent and safe to call from several processes at once.
func ensureIPv6Forwarding(ctx context.Context) error {
	return installBase(ctx, "", &ipv6Forwarding)
}

// forwardSwitch is one family's forwarding sysctl and the record of
// Tupper turning it on.
type forwardSwitch struct {
	name   string // of the sysctl, for messages and the record
	key    string // its path under procSys
	record string
	// prepare, if set, runs after the guard is in place and before the
	// sysctl is turned on; what it returns is added to the record.
	prepare func() (string, error)
}

var (
	ipv4Forwarding = forwardSwitch{name: "net.ipv4.ip_forward", key: "net/ipv4/ip_forward", record: ipForwardRecord}
	ipv6Forwarding = forwardSwitch{name: "net.ipv6.conf.all.forwarding", key: "net/ipv6/conf/all/forwarding", record: ipv6ForwardRecord,
		prepare: func() (string, error) { return keepAcceptingRA(filepath.Join(procSys, "net/ipv6/conf")) }}
)

// checkIfPrefix reports whether prefix can name host-side interfaces.
func checkIfPrefix(prefix string) error {
	if !ifPrefixPattern.MatchString(prefix) {
		return fmt.Errorf("firewall: interface prefix %q must be 1 to 3 characters of [a-z0-9]: %w", prefix, errdefs.ErrInvalidArgument)
	}
	return nil
}

// installBase installs the base rule set, adding prefix (when not empty)
// to the sandbox interfaces, under the host-wide firewall lock so that the
// guard rules and the forwarding switches stay consistent between daemons,
// and, when sw is set, turns that forwarding on.
func installBase(ctx context.Context, prefix string, sw *forwardSwitch) error {
	unlock, err := lockFile(ctx, firewallLock)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	defer unlock()

	on := true
	if sw != nil {
		b, err := os.ReadFile(filepath.Join(procSys, sw.key))
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		on = strings.TrimSpace(string(b)) != "0"
		if !on {
			// Recorded first: a crash between here and the sysctl leaves
			// a guard that is not needed, never a router without one.
			if err := os.WriteFile(sw.record, []byte("tupper turned "+sw.name+" on\n"), 0o644); err != nil {
				return fmt.Errorf("firewall: record %s: %w", sw.name, err)
			}
		}
	}
	guard4, err := exists(ipForwardRecord)
	if err != nil {
		return err
	}
	guard6, err := exists(ipv6ForwardRecord)
	if err != nil {
		return err
	}
	if err := runNFT(ctx, firewallRules(prefix, guard4, guard6)); err != nil {
		return err
	}
	if on {
		return nil
	}
	if sw.prepare != nil {
		note, err := sw.prepare()
		if note != "" {
			// Best effort: the record's existence is what counts.
			if f, ferr := os.OpenFile(sw.record, os.O_WRONLY|os.O_APPEND, 0); ferr == nil {
				f.WriteString(note + "\n")
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(procSys, sw.key), []byte("1"), 0o644); err != nil {
		return fmt.Errorf("firewall: turn on %s: %w", sw.name, err)
	}
	return nil
}

// exists reports whether path exists.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("firewall: %w", err)
	}
	return true, nil
}

// keepAcceptingRA sets accept_ra to 2 on every interface of dir (a
// net/ipv6/conf, "all" and "default" among them) where it is 1, so that
// the host still learns routes from router advertisements once IPv6
// forwarding is on. It returns a line naming the interfaces it changed, if
// any.
func keepAcceptingRA(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("accept_ra: %w", err)
	}
	var changed []string
	var errs []error
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "accept_ra")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the interface went away
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("accept_ra: %w", err))
			continue
		}
		if strings.TrimSpace(string(b)) != "1" {
			continue
		}
		if err := os.WriteFile(path, []byte("2"), 0o644); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("accept_ra: %w", err))
			}
			continue
		}
		changed = append(changed, e.Name())
	}
	note := ""
	if len(changed) > 0 {
		note = "tupper set accept_ra from 1 to 2 on: " + strings.Join(changed, " ")
	}
	return note, errors.Join(errs...)
}

// enableEgressSysctls lets the host side hostIf of a sandbox's veth carry
// egress: forwarding (the kernel routes what the sandbox sends) and
// route_localnet (the prerouting DNAT to the DNS server and the proxy on
// 127.0.0.1 is otherwise dropped as martian). rp_filter and disable_ipv6
// stay as the pool set them. Call it after the pool configured the
// interface and after ensureEgressBase, whose ip_forward switch resets
// every interface's forwarding.
func enableEgressSysctls(hostIf string) error {
	if !hostIfPattern.MatchString(hostIf) {
		return fmt.Errorf("firewall: interface name %q: %w", hostIf, errdefs.ErrInvalidArgument)
	}
	for _, s := range []struct{ key, value string }{
		{"forwarding", "1"},
		{"route_localnet", "1"},
	} {
		path := filepath.Join(procSys, "net/ipv4/conf", hostIf, s.key)
		if err := os.WriteFile(path, []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("firewall: sysctl %s: %w", path, err)
		}
	}
	return nil
}

// enableEgressSysctls6 lets the host side hostIf of a sandbox's veth carry
// IPv6 egress: IPv6 on, the host acting as the link's router (forwarding),
// and no router advertisements taken from the sandbox (accept_ra 0, set
// first), whatever "default" says. Call it after the pool configured the
// interface and after ensureIPv6Forwarding, whose switch resets every
// interface's forwarding.
func enableEgressSysctls6(hostIf string) error {
	if !hostIfPattern.MatchString(hostIf) {
		return fmt.Errorf("firewall: interface name %q: %w", hostIf, errdefs.ErrInvalidArgument)
	}
	for _, s := range []struct{ key, value string }{
		{"accept_ra", "0"},
		{"forwarding", "1"},
		{"disable_ipv6", "0"},
	} {
		path := filepath.Join(procSys, "net/ipv6/conf", hostIf, s.key)
		if err := os.WriteFile(path, []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("firewall: sysctl %s: %w", path, err)
		}
	}
	return nil
}

// hostIfPattern is what the firewall accepts as an interface name: it is
// spliced into chain names and nft input, so only plain characters.
var hostIfPattern = regexp.MustCompile(`^[a-zA-Z0-9_]{1,15}$`)

// runNFT applies script with `nft -f -`, as one transaction: it all
// applies or none of it does.
func runNFT(ctx context.Context, script string) error {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return fmt.Errorf("firewall: nft not found (install nftables; scripts/setup.sh does): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nft, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		if cerr := context.Cause(ctx); cerr != nil {
			// Killed because the caller's time ran out (or the 10 s
			// bound): say so, so that callers can tell a deadline from
			// a failure of nft's own.
			return fmt.Errorf("firewall: nft: %w (%v)", cerr, err)
		}
		return fmt.Errorf("firewall: nft: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
