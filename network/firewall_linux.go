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
)

// runDir holds the host-wide state of every Tupper daemon: locks and the
// record of who turned IPv4 forwarding on.
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
// guard adds a rule that drops forwarding between two interfaces that are
// not sandboxes': set when Tupper turned IPv4 forwarding on (see
// ensureEgressBase). The rules keep sandboxes isolated even when
// something else (Docker, a VPN) turns forwarding on.
//
// The file is idempotent: chains are flushed and refilled, maps and
// per-sandbox chains are left alone, and the prefix set only grows.
func firewallRules(prefix string, guard bool) string {
	var b strings.Builder
	w := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	t := "inet " + firewallTable
	w("add table %s", t)
	w("add set %s %s { type ifname; flags interval; }", t, sandboxIfSet)
	w(`add element %s %s { "%s*" }`, t, sandboxIfSet, prefix)
	w("add map %s %s { type ifname : verdict; }", t, forwardMap)
	w("add map %s %s { type ifname : verdict; }", t, preroutingMap)
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
	if guard {
		w("add rule %s forward iifname != %s oifname != %s drop", t, sbx, sbx)
	}

	w("add rule %s prerouting iifname %s iifname vmap @%s", t, sbx, preroutingMap)
	w("add rule %s postrouting iifname %s oifname != %s masquerade", t, sbx, sbx)
	return b.String()
}

// ensureFirewall installs the base rule set once per pool. It leaves IPv4
// forwarding as it is: a pool without egress needs none.
func (p *Pool) ensureFirewall(ctx context.Context) error {
	p.fwMu.Lock()
	defer p.fwMu.Unlock()
	if p.fwDone {
		return nil
	}
	if err := installBase(ctx, p.cfg.IfPrefix, false); err != nil {
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
	return installBase(ctx, prefix, true)
}

// installBase installs the base rule set, under the host-wide firewall
// lock so that the guard rule and the forwarding switch stay consistent
// between daemons, and, when forward is set, turns IPv4 forwarding on.
func installBase(ctx context.Context, prefix string, forward bool) error {
	if !ifPrefixPattern.MatchString(prefix) {
		return fmt.Errorf("firewall: interface prefix %q must be 1 to 3 characters of [a-z0-9]: %w", prefix, errdefs.ErrInvalidArgument)
	}
	unlock, err := lockFile(ctx, firewallLock)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	defer unlock()

	path := filepath.Join(procSys, "net/ipv4/ip_forward")
	on := false
	if forward {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		on = strings.TrimSpace(string(b)) != "0"
		if !on {
			// Recorded first: a crash between here and the sysctl leaves
			// a guard that is not needed, never a router without one.
			if err := os.WriteFile(ipForwardRecord, []byte("tupper turned net.ipv4.ip_forward on\n"), 0o644); err != nil {
				return fmt.Errorf("firewall: record ip_forward: %w", err)
			}
		}
	}
	_, err = os.Stat(ipForwardRecord)
	guard := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firewall: %w", err)
	}
	if err := runNFT(ctx, firewallRules(prefix, guard)); err != nil {
		return err
	}
	if forward && !on {
		if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("firewall: turn on ip_forward: %w", err)
		}
	}
	return nil
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
		return fmt.Errorf("firewall: nft: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
