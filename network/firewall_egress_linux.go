package network

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// sandboxFirewall describes the nftables rules of one sandbox.
type sandboxFirewall struct {
	HostIf      string     // host side veth name, e.g. "tp0a1b2c3d4e5f"
	SandboxAddr netip.Addr // e.g. 10.213.4.2
	HostAddr    netip.Addr // e.g. 10.213.4.1 (the sandbox's gateway and resolver address)
	// SandboxAddr6 is the sandbox's IPv6 address, e.g. fd74:7570:7065::2;
	// zero when the sandbox has no IPv6, which refuses every IPv6 packet
	// it sends. HostAddr6 is its gateway's, e.g. fd74:7570:7065::1; it may
	// be zero.
	SandboxAddr6 netip.Addr
	HostAddr6    netip.Addr
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
	// ruleNoIPv6 refuses IPv6 from a sandbox that has no IPv6 address.
	ruleNoIPv6 = "IPv6 egress is not available to this sandbox"
	// ruleIPv6Web refuses IPv6 HTTP(S) when the policy inspects it: the
	// egress proxy is reached over IPv4 only, and a reset at once sends
	// clients that try both families to IPv4 without waiting.
	ruleIPv6Web = "IPv6 to ports 80 and 443 under a domain policy (use IPv4)"
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
// e.g. []string{"always denied", `denyOut "0.0.0.0/0"`, `denyOut "::/0"`} for a sandbox with IPv6, or
// []string{"always denied", `denyOut "0.0.0.0/0"`, "IPv6 egress is not available to this sandbox"}
// for one without.
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
	// The flow counter of a sandbox that is gone.
	w(`add element %s %s { "%s" }`, t, redirectedFlows, hostIf)
	w(`delete element %s %s { "%s" }`, t, redirectedFlows, hostIf)
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
	w("add set %s %s { type ifname; flags dynamic; }", t, redirectedFlows)
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
	for _, a := range []struct {
		name string
		addr netip.Addr
	}{{"sandbox", fw.SandboxAddr6}, {"host", fw.HostAddr6}} {
		if a.addr.IsValid() && (!a.addr.Is6() || a.addr.Is4In6() || a.addr.Zone() != "") {
			errs = append(errs, fmt.Sprintf("%s IPv6 address %v must be IPv6, without a zone", a.name, a.addr))
		}
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
// disjoint IPv4 and IPv6 ranges, rather than rule by rule in the kernel:
// Forbidden less Exempt (rule 0), then denyOut less allowOut, each address
// named by the most specific denyOut entry that holds it (rules 1..n), as
// netpolicy's IPVerdict names it. The forward chain then needs one set
// lookup per packet and family whatever the size of the policy, and only
// denied packets go through the per-rule log rules. A sandbox without an
// IPv6 address is refused IPv6 whole (rule n+1); one with an address is
// refused IPv6 to TCP ports 80 and 443 when the policy inspects them
// (rule n+1), since only IPv4 reaches the egress proxy.
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
	has6 := fw.SandboxAddr6.IsValid()
	web6 := has6 && pol.Inspects()
	extra := len(ruleNames) // the index of ruleNoIPv6 or ruleIPv6Web
	switch {
	case !has6:
		ruleNames = append(ruleNames, ruleNoIPv6)
	case web6:
		ruleNames = append(ruleNames, ruleIPv6Web)
	}
	all := d.all()
	all4, all6 := familyRanges(all, false), familyRanges(all, true)

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
	if has6 {
		w("add rule %s %s ip6 saddr != %s drop", t, f, fw.SandboxAddr6)
	}
	// One sandbox must not fill the host's connection tracking table,
	// which every sandbox and the host itself share.
	w("add rule %s %s ct state new ct count over %d goto %s", t, f, maxForwardedFlows, dn)
	if len(all4) > 0 {
		w("add rule %s %s ip daddr { %s } goto %s", t, f, formatRanges(all4), dn)
	}
	w("add rule %s %s meta nfproto ipv4 accept", t, f)
	log := func(chain, match string, idx int) {
		if fw.LogGroup != 0 {
			w(`add rule %s %s %s limit rate %s log group %d prefix "%s %s %d" comment "%s"`,
				t, chain, match, denyLogRate, fw.LogGroup, denyLogPrefix, fw.HostIf, idx, nftComment(ruleNames[idx]))
		}
	}
	if has6 {
		if len(all6) > 0 {
			w("add rule %s %s ip6 daddr { %s } goto %s", t, f, formatRanges(all6), dn)
		}
		if web6 {
			const web = "meta nfproto ipv6 tcp dport { 80, 443 }"
			log(f, web, extra)
			w("add rule %s %s %s reject with tcp reset", t, f, web)
		}
		w("add rule %s %s meta nfproto ipv6 accept", t, f)
	}
	w("add rule %s %s goto %s", t, f, dn)

	// Deny: log which rule denied (when asked), then refuse at once.
	for i, rs := range d.byRule {
		if r4 := familyRanges(rs, false); len(r4) > 0 {
			log(dn, "ip daddr { "+formatRanges(r4)+" }", i)
		}
		if r6 := familyRanges(rs, true); has6 && len(r6) > 0 {
			log(dn, "ip6 daddr { "+formatRanges(r6)+" }", i)
		}
	}
	if !has6 {
		log(dn, "meta nfproto ipv6", extra)
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
		if f4 := familyRanges(d.forbidden, false); len(f4) > 0 {
			not = " ip daddr != { " + formatRanges(f4) + " }"
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

// denials are the destinations a sandbox may not reach, of both families,
// by the rule that denies them.
type denials struct {
	names     []string      // rule names by index: rule 0, then the denyOut prefixes
	forbidden []addrRange   // Forbidden less Exempt: rule 0
	byRule    [][]addrRange // by rule index; disjoint
}

// all returns every denied range, merged.
func (d *denials) all() []addrRange {
	var all []addrRange
	for _, rs := range d.byRule {
		all = append(all, rs...)
	}
	return mergeRanges(all)
}

// computeDenials works out which rule denies which destination, IPv4 and
// IPv6 alike: Forbidden less Exempt is rule 0, then each distinct denyOut
// prefix, in the policy's order, is a rule that holds what it denies (less
// allowOut and rule 0) and no more specific denyOut prefix does.
func computeDenials(forbidden, exempt, allow, deny []netip.Prefix) *denials {
	d := &denials{names: []string{ruleAlwaysDenied}}
	d.forbidden = subtractRanges(rangesOf(forbidden), rangesOf(exempt))
	d.byRule = [][]addrRange{d.forbidden}

	type entry struct {
		p   netip.Prefix
		idx int
	}
	var entries []entry
	seen := map[netip.Prefix]bool{}
	for _, p := range deny {
		p = p.Masked()
		if !p.IsValid() || seen[p] {
			continue
		}
		seen[p] = true
		entries = append(entries, entry{p, len(d.names)})
		d.names = append(d.names, `denyOut "`+p.String()+`"`)
		d.byRule = append(d.byRule, nil)
	}

	// What the policy denies and rule 0 does not already, handed out to
	// the most specific prefix first. Prefixes of the two families never
	// share an address, so their order between each other does not matter.
	left := subtractRanges(subtractRanges(rangesOf(deny), rangesOf(allow)), d.forbidden)
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(b.p.Bits(), a.p.Bits()) })
	for _, e := range entries {
		own := intersectRanges(left, rangesOf([]netip.Prefix{e.p}))
		d.byRule[e.idx] = own
		left = subtractRanges(left, own)
	}
	return d
}

// addrRange is an inclusive range of addresses of one family: lo and hi
// are both IPv4 or both IPv6 (IPv4-mapped IPv6 addresses are IPv6), and lo
// is not after hi. netip.Addr orders every IPv4 address before every IPv6
// one, so a sorted list of ranges holds the IPv4 ranges first, and the
// arithmetic below never joins ranges across families.
type addrRange struct{ lo, hi netip.Addr }

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	if a.Is4() {
		b := a.As4()
		setHostBits(b[:], p.Bits())
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	setHostBits(b[:], p.Bits())
	return netip.AddrFrom16(b)
}

// setHostBits sets the bits of b after the first bits.
func setHostBits(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8*(i+1):
		case bits <= 8*i:
			b[i] = 0xff
		default:
			b[i] |= 0xff >> (bits - 8*i)
		}
	}
}

// rangesOf returns the prefixes of ps as merged ranges.
func rangesOf(ps []netip.Prefix) []addrRange {
	var rs []addrRange
	for _, p := range ps {
		p = p.Masked()
		if !p.IsValid() {
			continue
		}
		rs = append(rs, addrRange{p.Addr(), lastAddr(p)})
	}
	return mergeRanges(rs)
}

// familyRanges returns the ranges of rs that are IPv6 when v6 is set,
// else those that are IPv4.
func familyRanges(rs []addrRange, v6 bool) []addrRange {
	var out []addrRange
	for _, r := range rs {
		if r.lo.Is6() == v6 {
			out = append(out, r)
		}
	}
	return out
}

// mergeRanges sorts rs and merges overlapping and adjacent ranges, which
// nft would otherwise refuse as overlapping elements of one set.
func mergeRanges(rs []addrRange) []addrRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b addrRange) int { return a.lo.Compare(b.lo) })
	var out []addrRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].hi.BitLen() == r.lo.BitLen() {
			// next is invalid after the family's last address.
			if next := out[n-1].hi.Next(); !next.IsValid() || r.lo.Compare(next) <= 0 {
				if out[n-1].hi.Less(r.hi) {
					out[n-1].hi = r.hi
				}
				continue
			}
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
		for j < len(b) && b[j].hi.Less(r.lo) {
			j++
		}
		// Any b[k] that reaches this far overlaps r, so is of r's family.
		lo, more := r.lo, true
		for k := j; more && k < len(b) && !r.hi.Less(b[k].lo); k++ {
			if lo.Less(b[k].lo) {
				out = append(out, addrRange{lo, b[k].lo.Prev()})
			}
			lo = b[k].hi.Next()
			more = lo.IsValid() // b[k] ends the family
		}
		if more && !r.hi.Less(lo) {
			out = append(out, addrRange{lo, r.hi})
		}
	}
	return out
}

// intersectRanges returns what a and b share; both must be merged.
func intersectRanges(a, b []addrRange) []addrRange {
	var out []addrRange
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := a[i].lo, a[i].hi
		if lo.Less(b[j].lo) {
			lo = b[j].lo
		}
		if b[j].hi.Less(hi) {
			hi = b[j].hi
		}
		// Ranges of different families give lo after hi.
		if !hi.Less(lo) {
			out = append(out, addrRange{lo, hi})
		}
		if a[i].hi.Less(b[j].hi) {
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
	// The prefix that starts at lo and ends at hi, if there is one.
	for bits := r.lo.BitLen(); bits >= 0; bits-- {
		p := netip.PrefixFrom(r.lo, bits)
		if p.Masked().Addr() != r.lo {
			break
		}
		if last := lastAddr(p); last == r.hi {
			if bits == r.lo.BitLen() {
				return nftAddr(r.lo)
			}
			return nftAddr(r.lo) + "/" + strconv.Itoa(bits)
		} else if r.hi.Less(last) {
			break
		}
	}
	return nftAddr(r.lo) + "-" + nftAddr(r.hi)
}

// nftAddr writes a as nft reads it. An IPv4-mapped IPv6 address is
// written in hexadecimal, as netip's dotted tail could be taken for IPv4.
func nftAddr(a netip.Addr) string {
	if a.Is4In6() {
		return a.StringExpanded()
	}
	return a.String()
}
