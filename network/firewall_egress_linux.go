package network

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// sandboxFirewall describes the nftables rules of one sandbox.
type sandboxFirewall struct {
	HostIf      string     // host side veth name, e.g. "tp0a1b2c3d4e5f"
	SandboxAddr netip.Addr // e.g. 10.213.4.2
	HostAddr    netip.Addr // e.g. 10.213.4.1 (the sandbox's gateway and resolver address)
	// Policy is the sandbox's egress policy; nil allows everything that
	// is not Forbidden.
	Policy    *netpolicy.Compiled
	Forbidden []netip.Prefix // never reachable: netpolicy.AlwaysDenied() + host's own addrs and on-link nets (caller computes)
	Exempt    []netip.Prefix // operator exemptions: win over Forbidden (still subject to Policy)
	DNSPort   uint16         // our DNS server on 127.0.0.1 (UDP and TCP); 0 leaves port 53 to the policy
	ProxyPort uint16         // our egress proxy on 127.0.0.1 (TCP); used only when Policy.Inspects()
	LogGroup  uint16         // NFLOG group for denials; 0 = do not log
}

// denyLogRate bounds the denials one rule logs, so that a sandbox that
// hammers a closed destination cannot flood the log listener.
const denyLogRate = "20/second"

// denyLogPrefix starts the NFLOG prefix of a denial: "tpd <hostIf> <rule>".
const denyLogPrefix = "tpd"

// Rule names of the denials that are not a denyOut entry.
const (
	ruleAlwaysDenied = "always denied"
	ruleIPv6         = "IPv6 egress is not supported"
)

// Chain names of a sandbox: its forward filter, its denial chain, its
// prerouting NAT chain.
func fwdChain(hostIf string) string { return "f_" + hostIf }

// maxForwardedFlows is how many connections a sandbox may have through
// the host's NAT at once; more are refused.
const maxForwardedFlows = 8192

func denyChain(hostIf string) string { return "d_" + hostIf }
func natChain(hostIf string) string  { return "n_" + hostIf }

// applySandboxFirewall installs or atomically replaces the chains of fw.HostIf (one nft transaction).
// It returns the human-readable names of the rules that can deny, indexed as encoded in the log prefix,
// e.g. []string{"always denied", `denyOut "0.0.0.0/0"`, "IPv6 egress is not supported"}.
//
// The forward chain is evaluated on every packet the sandbox sends, not
// only on new flows: a replace that denies a destination cuts established
// connections to it, the sandbox's next packet being answered with a reset.
// The base rule set (ensureEgressBase) must be in place for the chains to
// be reached.
func applySandboxFirewall(ctx context.Context, fw *sandboxFirewall) (ruleNames []string, err error) {
	script, names, err := sandboxRules(fw)
	if err != nil {
		return nil, err
	}
	if err := runNFT(ctx, script); err != nil {
		return nil, fmt.Errorf("sandbox interface %s: %w", fw.HostIf, err)
	}
	return names, nil
}

// removeSandboxFirewall removes the chains and map entries of hostIf; idempotent (missing is fine).
func removeSandboxFirewall(ctx context.Context, hostIf string) error {
	if !hostIfPattern.MatchString(hostIf) {
		return fmt.Errorf("firewall: interface name %q: %w", hostIf, errdefs.ErrInvalidArgument)
	}
	if err := runNFT(ctx, removeRules(hostIf)); err != nil {
		return fmt.Errorf("sandbox interface %s: %w", hostIf, err)
	}
	return nil
}

// removeRules returns the transaction that removes hostIf's chains and map
// entries. nft (before 1.0.8) has no "delete if it exists", so the
// transaction first adds what it deletes: whatever was there, the end
// state is the same. It may leave an empty table with empty maps behind
// when there was none, which the base rule set would create anyway.
func removeRules(hostIf string) string {
	var b strings.Builder
	w := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	t := "inet " + firewallTable
	declareTable(w)
	chains := []string{fwdChain(hostIf), denyChain(hostIf), natChain(hostIf)}
	for _, c := range chains {
		w("add chain %s %s", t, c)
	}
	w(`add element %s %s { "%s" : goto %s }`, t, forwardMap, hostIf, fwdChain(hostIf))
	w(`add element %s %s { "%s" : goto %s }`, t, preroutingMap, hostIf, natChain(hostIf))
	w(`delete element %s %s { "%s" }`, t, forwardMap, hostIf)
	w(`delete element %s %s { "%s" }`, t, preroutingMap, hostIf)
	for _, c := range chains {
		w("flush chain %s %s", t, c)
	}
	for _, c := range chains {
		w("delete chain %s %s", t, c)
	}
	return b.String()
}

// declareTable writes what a sandbox's transaction refers to in the base
// rule set, idempotently, so that the transaction never fails for want of
// it.
func declareTable(w func(string, ...any)) {
	t := "inet " + firewallTable
	w("add table %s", t)
	w("add map %s %s { type ifname : verdict; }", t, forwardMap)
	w("add map %s %s { type ifname : verdict; }", t, preroutingMap)
}

// validate reports whether fw can be turned into rules.
func (fw *sandboxFirewall) validate() error {
	var errs []string
	if !hostIfPattern.MatchString(fw.HostIf) {
		errs = append(errs, fmt.Sprintf("interface name %q", fw.HostIf))
	}
	if !fw.SandboxAddr.Is4() {
		errs = append(errs, fmt.Sprintf("sandbox address %v must be IPv4", fw.SandboxAddr))
	}
	if fw.HostAddr.IsValid() && !fw.HostAddr.Is4() {
		errs = append(errs, fmt.Sprintf("host address %v must be IPv4", fw.HostAddr))
	}
	for _, p := range slices.Concat(fw.Forbidden, fw.Exempt) {
		if !p.IsValid() {
			errs = append(errs, "an invalid prefix in Forbidden or Exempt")
			break
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("firewall: %s: %w", strings.Join(errs, "; "), errdefs.ErrInvalidArgument)
	}
	return nil
}

// sandboxRules returns the nft transaction that installs or replaces fw's
// chains, and the names of its denying rules by index.
//
// The destinations a sandbox may not reach are worked out here, as
// disjoint IPv4 ranges, rather than rule by rule in the kernel: Forbidden
// less Exempt (rule 0), then denyOut less allowOut, each address named by
// the most specific denyOut entry that holds it (rules 1..n), as
// netpolicy's IPVerdict names it. The forward chain then needs one set
// lookup per packet whatever the size of the policy, and only denied
// packets go through the per-rule log rules. IPv6 is denied whole (rule
// n+1).
func sandboxRules(fw *sandboxFirewall) (script string, ruleNames []string, err error) {
	if err := fw.validate(); err != nil {
		return "", nil, err
	}
	pol := fw.Policy
	if pol == nil {
		pol = netpolicy.Compile(nil)
	}
	d := computeDenials(fw.Forbidden, fw.Exempt, pol.AllowNets(), pol.DenyNets())
	ruleNames = d.names

	var b strings.Builder
	w := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	t := "inet " + firewallTable
	f, dn, n := fwdChain(fw.HostIf), denyChain(fw.HostIf), natChain(fw.HostIf)
	declareTable(w)
	for _, c := range []string{f, dn, n} {
		w("add chain %s %s", t, c)
	}
	for _, c := range []string{f, dn, n} {
		w("flush chain %s %s", t, c)
	}

	// Forward: what the sandbox sends beyond the host.
	// A spoofed source (gVisor allows raw sockets) would be masqueraded
	// as the host's own traffic; rp_filter catches most, this the rest.
	w("add rule %s %s ip saddr != %s drop", t, f, fw.SandboxAddr)
	// One sandbox must not fill the host's connection tracking table,
	// which every sandbox and the host itself share.
	w("add rule %s %s ct state new ct count over %d goto %s", t, f, maxForwardedFlows, dn)
	if all := d.all(); len(all) > 0 {
		w("add rule %s %s ip daddr { %s } goto %s", t, f, formatRanges(all), dn)
	}
	w("add rule %s %s meta nfproto ipv4 accept", t, f)
	w("add rule %s %s goto %s", t, f, dn)

	// Deny: log which rule denied (when asked), then refuse at once.
	if fw.LogGroup != 0 {
		log := func(match string, idx int) {
			w(`add rule %s %s %s limit rate %s log group %d prefix "%s %s %d" comment "%s"`,
				t, dn, match, denyLogRate, fw.LogGroup, denyLogPrefix, fw.HostIf, idx, nftComment(ruleNames[idx]))
		}
		for i, rs := range d.byRule {
			if len(rs) > 0 {
				log("ip daddr { "+formatRanges(rs)+" }", i)
			}
		}
		log("meta nfproto ipv6", len(ruleNames)-1)
	}
	w("add rule %s %s meta l4proto tcp reject with tcp reset", t, dn)
	w("add rule %s %s reject with icmpx admin-prohibited", t, dn)

	// NAT, on a flow's first packet: DNS to our resolver, and, when the
	// policy names domains or transforms requests, HTTP(S) to our proxy,
	// which reads the original destination (SO_ORIGINAL_DST) and decides
	// by Host/SNI. Forbidden destinations are never proxied: the forward
	// chain refuses them.
	from := fmt.Sprintf("meta nfproto ipv4 ip saddr %s", fw.SandboxAddr)
	if fw.DNSPort != 0 {
		w("add rule %s %s %s meta l4proto { tcp, udp } th dport 53 dnat ip to 127.0.0.1:%d", t, n, from, fw.DNSPort)
	}
	if pol.Inspects() && fw.ProxyPort != 0 {
		not := ""
		if len(d.forbidden) > 0 {
			not = " ip daddr != { " + formatRanges(d.forbidden) + " }"
		}
		w("add rule %s %s %s tcp dport { 80, 443 }%s dnat ip to 127.0.0.1:%d", t, n, from, not, fw.ProxyPort)
	}

	w(`add element %s %s { "%s" : goto %s }`, t, forwardMap, fw.HostIf, f)
	w(`add element %s %s { "%s" : goto %s }`, t, preroutingMap, fw.HostIf, n)
	return b.String(), ruleNames, nil
}

// nftComment makes s fit in an nft comment, which cannot hold a quote.
func nftComment(s string) string {
	return strings.ReplaceAll(s, `"`, "'")
}

// denials are the IPv4 destinations a sandbox may not reach, by the rule
// that denies them.
type denials struct {
	names     []string      // rule names by index
	forbidden []addrRange   // Forbidden less Exempt: rule 0
	byRule    [][]addrRange // by rule index; disjoint; the last (IPv6) is empty
}

// all returns every denied range, merged.
func (d *denials) all() []addrRange {
	var all []addrRange
	for _, rs := range d.byRule {
		all = append(all, rs...)
	}
	return mergeRanges(all)
}

// computeDenials works out which rule denies which IPv4 destination.
// IPv6 prefixes in the lists are ignored: IPv6 is denied whole.
func computeDenials(forbidden, exempt, allow, deny []netip.Prefix) *denials {
	d := &denials{names: []string{ruleAlwaysDenied}}
	d.forbidden = subtractRanges(rangesOf(forbidden), rangesOf(exempt))
	d.byRule = [][]addrRange{d.forbidden}

	// One rule per distinct IPv4 denyOut prefix, in the policy's order.
	type entry struct {
		p   netip.Prefix
		idx int
	}
	var entries []entry
	seen := map[netip.Prefix]bool{}
	for _, p := range deny {
		p = p.Masked()
		if !p.Addr().Is4() || seen[p] {
			continue
		}
		seen[p] = true
		entries = append(entries, entry{p, len(d.names)})
		d.names = append(d.names, `denyOut "`+p.String()+`"`)
		d.byRule = append(d.byRule, nil)
	}
	d.names = append(d.names, ruleIPv6)
	d.byRule = append(d.byRule, nil)

	// What the policy denies and rule 0 does not already, handed out to
	// the most specific prefix first.
	left := subtractRanges(subtractRanges(rangesOf(deny), rangesOf(allow)), d.forbidden)
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(b.p.Bits(), a.p.Bits()) })
	for _, e := range entries {
		own := intersectRanges(left, rangesOf([]netip.Prefix{e.p}))
		d.byRule[e.idx] = own
		left = subtractRanges(left, own)
	}
	return d
}

// addrRange is an inclusive range of IPv4 addresses, as integers.
type addrRange struct{ lo, hi uint32 }

func addrToUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uintToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// rangesOf returns the IPv4 prefixes of ps as merged ranges.
func rangesOf(ps []netip.Prefix) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		p = p.Masked()
		if !p.IsValid() || !p.Addr().Is4() {
			continue
		}
		lo := addrToUint(p.Addr())
		hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
		rs = append(rs, addrRange{lo, hi})
	}
	return mergeRanges(rs)
}

// mergeRanges sorts rs and merges overlapping and adjacent ranges, which
// nft would otherwise refuse as overlapping elements of one set.
func mergeRanges(rs []addrRange) []addrRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b addrRange) int { return cmp.Compare(a.lo, b.lo) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1].hi == ^uint32(0) || r.lo <= out[n-1].hi+1) {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// subtractRanges returns a less b; both must be merged.
func subtractRanges(a, b []addrRange) []addrRange {
	var out []addrRange
	j := 0
	for _, r := range a {
		lo := uint64(r.lo)
		for j < len(b) && b[j].hi < r.lo {
			j++
		}
		for k := j; k < len(b) && b[k].lo <= r.hi && lo <= uint64(r.hi); k++ {
			if uint64(b[k].lo) > lo {
				out = append(out, addrRange{uint32(lo), b[k].lo - 1})
			}
			lo = uint64(b[k].hi) + 1
		}
		if lo <= uint64(r.hi) {
			out = append(out, addrRange{uint32(lo), r.hi})
		}
	}
	return out
}

// intersectRanges returns what a and b share; both must be merged.
func intersectRanges(a, b []addrRange) []addrRange {
	var out []addrRange
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, addrRange{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// formatRanges writes rs as nft set elements: a prefix where a range is
// one, else "first-last".
func formatRanges(rs []addrRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = formatRange(r)
	}
	return strings.Join(parts, ", ")
}

func formatRange(r addrRange) string {
	size := uint64(r.hi) - uint64(r.lo) + 1
	if size&(size-1) == 0 && uint64(r.lo)%size == 0 {
		p := netip.PrefixFrom(uintToAddr(r.lo), 32-bits.TrailingZeros64(size))
		if p.Bits() == 32 {
			return p.Addr().String()
		}
		return p.String()
	}
	return uintToAddr(r.lo).String() + "-" + uintToAddr(r.hi).String()
}
