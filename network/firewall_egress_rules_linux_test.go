package network

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/netpolicy"
)

// These tests need neither root nor nft: they check the generated rules.

func compile(t *testing.T, p *netpolicy.Policy) *netpolicy.Compiled {
	t.Helper()
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	return netpolicy.Compile(p)
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// hasRule reports whether script holds the line want, or, when want is not
// a whole command, a line that contains it.
func hasRule(script, want string) bool {
	for _, line := range strings.Split(script, "\n") {
		if line == want || (!strings.HasPrefix(want, "add ") && strings.Contains(line, want)) {
			return true
		}
	}
	return false
}

func TestFirewallRulesText(t *testing.T) {
	for _, tc := range []struct {
		name           string
		prefix         string
		guard4, guard6 bool
		want           []string
		unwant         []string
	}{
		{
			name:   "no guard",
			prefix: "tp",
			want: []string{
				`add element inet tupper sbxif { "tp*" }`,
				"add map inet tupper sbxfwd { type ifname : verdict; }",
				"add rule inet tupper input iifname @sbxif ct status dnat ip daddr 127.0.0.1 accept",
				"add rule inet tupper input iifname @sbxif icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept",
				"add rule inet tupper input iifname @sbxif goto refuse",
				"add rule inet tupper forward oifname @sbxif drop",
				// No family: the clamp and the masquerade hold for IPv6 too.
				"add rule inet tupper forward iifname @sbxif tcp flags syn tcp option maxseg size set rt mtu",
				"add rule inet tupper forward iifname @sbxif iifname vmap @sbxfwd",
				"add rule inet tupper prerouting iifname @sbxif iifname vmap @sbxpre",
				"add rule inet tupper postrouting iifname @sbxif oifname != @sbxif masquerade",
			},
			unwant: []string{"oifname != @sbxif drop", "flush map", "flush set"},
		},
		{
			name:   "guard for both families",
			prefix: "tp",
			guard4: true, guard6: true,
			want: []string{"add rule inet tupper forward iifname != @sbxif oifname != @sbxif drop"},
		},
		{
			name:   "guard for IPv4",
			prefix: "tp",
			guard4: true,
			want:   []string{"add rule inet tupper forward meta nfproto ipv4 iifname != @sbxif oifname != @sbxif drop"},
			unwant: []string{"nfproto ipv6 iifname"},
		},
		{
			name:   "guard for IPv6, no prefix",
			guard6: true,
			want:   []string{"add rule inet tupper forward meta nfproto ipv6 iifname != @sbxif oifname != @sbxif drop"},
			unwant: []string{"add element", "nfproto ipv4 iifname"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firewallRules(tc.prefix, tc.guard4, tc.guard6)
			for _, w := range tc.want {
				if !hasRule(got, w) {
					t.Errorf("rules lack %q:\n%s", w, got)
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(got, w) {
					t.Errorf("rules hold %q:\n%s", w, got)
				}
			}
			// Only the DNAT and neighbour discovery name a family.
			for _, line := range strings.Split(got, "\n") {
				if strings.Contains(line, "ip ") && !strings.Contains(line, "dnat") ||
					strings.Contains(line, "ip6 ") && !strings.Contains(line, "icmpv6") {
					t.Errorf("a rule of one family: %q", line)
				}
			}
		})
	}
}

func TestSandboxRulesText(t *testing.T) {
	base := sandboxFirewall{
		HostIf:      "tpabc",
		SandboxAddr: netip.MustParseAddr("10.213.4.2"),
		HostAddr:    netip.MustParseAddr("10.213.4.1"),
		Forbidden:   prefixes("10.0.0.0/8", "127.0.0.0/8", "fc00::/7"),
		DNSPort:     5353,
		ProxyPort:   8080,
	}
	for _, tc := range []struct {
		name      string
		modify    func(fw *sandboxFirewall)
		wantNames []string
		want      []string
		ordered   bool // want's lines appear in this order
		unwant    []string
	}{
		{
			name:      "allow all, no log",
			wantNames: []string{ruleAlwaysDenied, ruleNoIPv6},
			want: []string{
				"add rule inet tupper f_tpabc ip saddr != 10.213.4.2 drop",
				"add rule inet tupper f_tpabc ip daddr { 10.0.0.0/8, 127.0.0.0/8 } goto d_tpabc",
				"add rule inet tupper f_tpabc meta nfproto ipv4 accept",
				"add rule inet tupper f_tpabc goto d_tpabc",
				"add rule inet tupper d_tpabc meta l4proto tcp reject with tcp reset",
				"add rule inet tupper d_tpabc reject with icmpx admin-prohibited",
				"add rule inet tupper n_tpabc meta nfproto ipv4 ip saddr 10.213.4.2 meta l4proto { tcp, udp } th dport 53 dnat ip to 127.0.0.1:5353",
				`add element inet tupper sbxfwd { "tpabc" : goto f_tpabc }`,
				`add element inet tupper sbxpre { "tpabc" : goto n_tpabc }`,
			},
			unwant: []string{" log ", "127.0.0.1:8080"},
		},
		{
			name: "deny all but one, logged, with domains",
			modify: func(fw *sandboxFirewall) {
				fw.Policy = compile(t, &netpolicy.Policy{
					AllowOut: []string{"203.0.113.7", "example.com"},
					DenyOut:  []string{"0.0.0.0/0", "198.51.100.0/24", "::/0"},
				})
				fw.LogGroup = 40001
			},
			// 0.0.0.0/0 is all traffic: ::/0 comes with it.
			wantNames: []string{ruleAlwaysDenied, `denyOut "0.0.0.0/0"`, `denyOut "::/0"`, `denyOut "198.51.100.0/24"`, ruleNoIPv6},
			want: []string{
				"add rule inet tupper f_tpabc ip daddr { 0.0.0.0-203.0.113.6, 203.0.113.8-255.255.255.255 } goto d_tpabc",
				`add rule inet tupper d_tpabc ip daddr { 10.0.0.0/8, 127.0.0.0/8 } limit rate 20/second log group 40001 prefix "tpd tpabc 0" comment "always denied"`,
				`add rule inet tupper d_tpabc ip daddr { 198.51.100.0/24 } limit rate 20/second log group 40001 prefix "tpd tpabc 3" comment "denyOut '198.51.100.0/24'"`,
				`add rule inet tupper d_tpabc meta nfproto ipv6 limit rate 20/second log group 40001 prefix "tpd tpabc 4" comment "IPv6 egress is not available to this sandbox"`,
				"add rule inet tupper n_tpabc meta nfproto ipv4 ip saddr 10.213.4.2 tcp dport { 80, 443 } ip daddr != { 10.0.0.0/8, 127.0.0.0/8 } dnat ip to 127.0.0.1:8080",
			},
			// Without an IPv6 address, IPv6 is refused whole.
			unwant: []string{"ip6 ", "meta nfproto ipv6 accept", "tcp dport { 80, 443 } reject"},
		},
		{
			name: "exempt lifts forbidden, policy still denies",
			modify: func(fw *sandboxFirewall) {
				fw.Exempt = prefixes("10.1.0.0/16", "10.2.0.0/16")
				fw.Policy = compile(t, &netpolicy.Policy{DenyOut: []string{"10.2.3.0/24"}})
				fw.LogGroup = 7
				fw.DNSPort = 0
			},
			wantNames: []string{ruleAlwaysDenied, `denyOut "10.2.3.0/24"`, ruleNoIPv6},
			want: []string{
				"add rule inet tupper f_tpabc ip daddr { 10.0.0.0/16, 10.2.3.0/24, 10.3.0.0-10.255.255.255, 127.0.0.0/8 } goto d_tpabc",
				`prefix "tpd tpabc 1"`,
			},
			unwant: []string{"dport 53", "127.0.0.1:8080"},
		},
		{
			name: "IPv6, allow all, no log",
			modify: func(fw *sandboxFirewall) {
				fw.SandboxAddr6 = netip.MustParseAddr("fd74:7570:7065::2")
				fw.HostAddr6 = netip.MustParseAddr("fd74:7570:7065::1")
			},
			wantNames: []string{ruleAlwaysDenied},
			want: []string{
				"add rule inet tupper f_tpabc ip saddr != 10.213.4.2 drop",
				"add rule inet tupper f_tpabc ip6 saddr != fd74:7570:7065::2 drop",
				"add rule inet tupper f_tpabc ct state new ct count over 8192 goto d_tpabc",
				"add rule inet tupper f_tpabc ip daddr { 10.0.0.0/8, 127.0.0.0/8 } goto d_tpabc",
				"add rule inet tupper f_tpabc meta nfproto ipv4 accept",
				"add rule inet tupper f_tpabc ip6 daddr { fc00::/7 } goto d_tpabc",
				"add rule inet tupper f_tpabc meta nfproto ipv6 accept",
				"add rule inet tupper f_tpabc goto d_tpabc",
				"add rule inet tupper d_tpabc meta l4proto tcp reject with tcp reset",
			},
			ordered: true,
			unwant:  []string{" log ", "dport { 80, 443 }", "nfproto ipv6 drop"},
		},
		{
			name: "IPv6, deny all but one, logged, with domains",
			modify: func(fw *sandboxFirewall) {
				fw.SandboxAddr6 = netip.MustParseAddr("fd74:7570:7065::2")
				fw.Policy = compile(t, &netpolicy.Policy{
					AllowOut: []string{"2001:db8::10", "example.com"},
					DenyOut:  []string{"::/0", "2001:db8::/32", "0.0.0.0/0"},
				})
				fw.LogGroup = 9
			},
			wantNames: []string{ruleAlwaysDenied, `denyOut "::/0"`, `denyOut "2001:db8::/32"`, `denyOut "0.0.0.0/0"`, ruleIPv6Web},
			want: []string{
				"add rule inet tupper f_tpabc ip6 saddr != fd74:7570:7065::2 drop",
				"add rule inet tupper f_tpabc ip daddr { 0.0.0.0/0 } goto d_tpabc",
				"add rule inet tupper f_tpabc meta nfproto ipv4 accept",
				"add rule inet tupper f_tpabc ip6 daddr { ::-2001:db8::f, 2001:db8::11-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff } goto d_tpabc",
				`add rule inet tupper f_tpabc meta nfproto ipv6 tcp dport { 80, 443 } limit rate 20/second log group 9 prefix "tpd tpabc 4" comment "IPv6 to ports 80 and 443 under a domain policy (use IPv4)"`,
				"add rule inet tupper f_tpabc meta nfproto ipv6 tcp dport { 80, 443 } reject with tcp reset",
				"add rule inet tupper f_tpabc meta nfproto ipv6 accept",
				"add rule inet tupper f_tpabc goto d_tpabc",
				`add rule inet tupper d_tpabc ip daddr { 10.0.0.0/8, 127.0.0.0/8 } limit rate 20/second log group 9 prefix "tpd tpabc 0" comment "always denied"`,
				`add rule inet tupper d_tpabc ip6 daddr { fc00::/7 } limit rate 20/second log group 9 prefix "tpd tpabc 0" comment "always denied"`,
				`add rule inet tupper d_tpabc ip6 daddr { ::-2001:db7:ffff:ffff:ffff:ffff:ffff:ffff, 2001:db9::-fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff, fe00::/7 } limit rate 20/second log group 9 prefix "tpd tpabc 1" comment "denyOut '::/0'"`,
				`add rule inet tupper d_tpabc ip6 daddr { 2001:db8::/124, 2001:db8::11-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff } limit rate 20/second log group 9 prefix "tpd tpabc 2" comment "denyOut '2001:db8::/32'"`,
				`add rule inet tupper d_tpabc ip daddr { 0.0.0.0-9.255.255.255, 11.0.0.0-126.255.255.255, 128.0.0.0/1 } limit rate 20/second log group 9 prefix "tpd tpabc 3" comment "denyOut '0.0.0.0/0'"`,
				"add rule inet tupper d_tpabc meta l4proto tcp reject with tcp reset",
				"add rule inet tupper n_tpabc meta nfproto ipv4 ip saddr 10.213.4.2 tcp dport { 80, 443 } ip daddr != { 10.0.0.0/8, 127.0.0.0/8 } dnat ip to 127.0.0.1:8080",
			},
			ordered: true,
			unwant:  []string{ruleNoIPv6, "dnat ip6"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := base
			if tc.modify != nil {
				tc.modify(&fw)
			}
			script, names, err := sandboxRules(&fw)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("rule names (-want +got):\n%s", diff)
			}
			for _, w := range tc.want {
				if !hasRule(script, w) {
					t.Errorf("rules lack %q:\n%s", w, script)
				}
			}
			if tc.ordered {
				lines := strings.Split(script, "\n")
				at := -1
				for _, w := range tc.want {
					i := slices.Index(lines, w)
					if i >= 0 && i < at {
						t.Errorf("%q comes before the line wanted before it:\n%s", w, script)
					}
					at = max(at, i)
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(script, w) {
					t.Errorf("rules hold %q:\n%s", w, script)
				}
			}
		})
	}
}

func TestSandboxRulesRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		fw   sandboxFirewall
	}{
		{"empty interface", sandboxFirewall{SandboxAddr: netip.MustParseAddr("10.0.0.2")}},
		{"nft syntax in interface", sandboxFirewall{HostIf: `tp" }`, SandboxAddr: netip.MustParseAddr("10.0.0.2")}},
		{"too long interface", sandboxFirewall{HostIf: "tp0123456789abcdef", SandboxAddr: netip.MustParseAddr("10.0.0.2")}},
		{"no sandbox address", sandboxFirewall{HostIf: "tp1"}},
		{"IPv6 sandbox address", sandboxFirewall{HostIf: "tp1", SandboxAddr: netip.MustParseAddr("fd00::2")}},
		{"IPv4 as IPv6 sandbox address", sandboxFirewall{HostIf: "tp1", SandboxAddr: netip.MustParseAddr("10.0.0.2"), SandboxAddr6: netip.MustParseAddr("10.0.0.3")}},
		{"IPv4-mapped IPv6 sandbox address", sandboxFirewall{HostIf: "tp1", SandboxAddr: netip.MustParseAddr("10.0.0.2"), SandboxAddr6: netip.MustParseAddr("::ffff:10.0.0.3")}},
		{"IPv6 sandbox address with a zone", sandboxFirewall{HostIf: "tp1", SandboxAddr: netip.MustParseAddr("10.0.0.2"), SandboxAddr6: netip.MustParseAddr("fe80::2%eth0")}},
		{"IPv4 as IPv6 host address", sandboxFirewall{HostIf: "tp1", SandboxAddr: netip.MustParseAddr("10.0.0.2"), SandboxAddr6: netip.MustParseAddr("fd00::2"), HostAddr6: netip.MustParseAddr("10.0.0.1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := sandboxRules(&tc.fw); err == nil {
				t.Error("sandboxRules accepted it")
			}
		})
	}
}

// checkDenialRanges checks the ranges computeDenials gives against a direct
// reading of the rules at each probe: Exempt lifts Forbidden, then
// netpolicy's IPVerdict decides and names the rule. Probes are added at
// the edges of every prefix involved.
func checkDenialRanges(t *testing.T, forbidden, exempt []netip.Prefix, pol *netpolicy.Compiled, probes []netip.Addr) {
	t.Helper()
	d := computeDenials(forbidden, exempt, pol.AllowNets(), pol.DenyNets())
	in := func(ps []netip.Prefix, a netip.Addr) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	wantRule := func(a netip.Addr) string {
		if in(forbidden, a) && !in(exempt, a) {
			return ruleAlwaysDenied
		}
		if v := pol.IPVerdict(a); !v.Allowed {
			return v.Rule
		}
		return ""
	}
	holds := func(r addrRange, a netip.Addr) bool { return !a.Less(r.lo) && !r.hi.Less(a) }
	gotRule := func(a netip.Addr) string {
		found := ""
		for i, rs := range d.byRule {
			for _, r := range rs {
				if holds(r, a) {
					if found != "" {
						t.Errorf("%s is in rule %q and rule %q", a, found, d.names[i])
					}
					found = d.names[i]
				}
			}
		}
		inAll := false
		for _, r := range familyRanges(d.all(), a.Is6()) {
			inAll = inAll || holds(r, a)
		}
		if inAll != (found != "") {
			t.Errorf("%s: in the forward chain's set %v, in a rule's %q", a, inAll, found)
		}
		return found
	}
	for _, p := range slices.Concat(forbidden, exempt, pol.AllowNets(), pol.DenyNets()) {
		lo, hi := p.Masked().Addr(), lastAddr(p)
		probes = append(probes, lo, hi)
		if prev := lo.Prev(); prev.IsValid() {
			probes = append(probes, prev)
		}
		if next := hi.Next(); next.IsValid() {
			probes = append(probes, next)
		}
	}
	for _, a := range probes {
		if got, want := gotRule(a), wantRule(a); got != want {
			t.Errorf("%s: denied by %q, want %q", a, got, want)
		}
	}
}

// randomNear returns n addresses that share the first bits-8 bits of p
// (all of them when p is short), the rest random.
func randomNear(r *rand.Rand, p netip.Prefix, n int) []netip.Addr {
	keep := max(p.Bits()-8, 0)
	var out []netip.Addr
	for range n {
		b := p.Addr().AsSlice()
		for i := range b {
			random := byte(r.Uint32())
			switch {
			case keep >= 8*(i+1):
			case keep <= 8*i:
				b[i] = random
			default:
				m := byte(0xff) >> (keep - 8*i)
				b[i] = b[i]&^m | random&m
			}
		}
		a, _ := netip.AddrFromSlice(b)
		out = append(out, a)
	}
	return out
}

func TestComputeDenialsMatchesPolicy(t *testing.T) {
	forbidden := append(netpolicy.AlwaysDenied(), prefixes("192.0.2.2/32", "192.0.2.0/24")...)
	exempt := prefixes("10.20.0.0/16", "169.254.169.254/32")
	pol := compile(t, &netpolicy.Policy{
		AllowOut: []string{"203.0.113.0/25", "10.20.30.0/24", "8.8.8.8", "api.example.com"},
		DenyOut:  []string{"0.0.0.0/0", "203.0.113.0/24", "203.0.113.0/24", "10.20.0.0/16", "8.0.0.0/7", "::/0"},
	})
	d := computeDenials(forbidden, exempt, pol.AllowNets(), pol.DenyNets())
	want := []string{ruleAlwaysDenied, `denyOut "0.0.0.0/0"`, `denyOut "::/0"`, `denyOut "203.0.113.0/24"`, `denyOut "10.20.0.0/16"`, `denyOut "8.0.0.0/7"`}
	if diff := cmp.Diff(want, d.names); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
	var probes []netip.Addr
	for _, s := range []string{
		"0.0.0.0", "255.255.255.255", "10.20.30.1", "10.20.31.1", "10.21.0.1", "169.254.169.254",
		"169.254.169.253", "203.0.113.1", "203.0.113.200", "8.8.8.8", "8.8.8.9", "9.255.255.255",
		"192.0.2.1", "1.1.1.1", "127.0.0.1", "198.51.100.1", "2001:db8::1", "::", "::ffff:8.8.8.8",
	} {
		probes = append(probes, netip.MustParseAddr(s))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		probes = append(probes, netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, r.Uint32()))))
	}
	checkDenialRanges(t, forbidden, exempt, pol, probes)
}

// TestComputeDenialsMatchesPolicyIPv6 is TestComputeDenialsMatchesPolicy
// for IPv6, with IPv4 entries mixed in, probed at random addresses near
// every prefix involved.
func TestComputeDenialsMatchesPolicyIPv6(t *testing.T) {
	forbidden := append(netpolicy.AlwaysDenied(), prefixes("2001:db8:ffff::1/128", "2001:db8:ffff::/126", "fd00::2/128", "fd00::/64", "192.0.2.0/24")...)
	exempt := prefixes("fd74:7570:7065:1::/64", "fe80::1/128", "fd00::2/128", "10.20.0.0/16")
	pol := compile(t, &netpolicy.Policy{
		AllowOut: []string{"2001:db8:1::/48", "2001:db8:2::5", "fd74:7570:7065:1:1::/80", "2600::/12", "10.20.30.0/24", "example.com"},
		DenyOut: []string{"::/0", "2001:db8::/32", "2001:db8::/32", "2001:db8:2::/64", "fd74:7570:7065::/48", "0.0.0.0/0",
			"2001:db8:3::/48", "8000::/1", "10.0.0.0/8", "::ffff:0:0/96"},
	})
	d := computeDenials(forbidden, exempt, pol.AllowNets(), pol.DenyNets())
	want := []string{ruleAlwaysDenied, `denyOut "::/0"`, `denyOut "2001:db8::/32"`, `denyOut "2001:db8:2::/64"`, `denyOut "fd74:7570:7065::/48"`,
		`denyOut "0.0.0.0/0"`, `denyOut "2001:db8:3::/48"`, `denyOut "8000::/1"`, `denyOut "10.0.0.0/8"`, `denyOut "::ffff:0.0.0.0/96"`}
	if diff := cmp.Diff(want, d.names); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
	var probes []netip.Addr
	for _, s := range []string{
		"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::1", "2001:db8::1", "2001:db8:1::1", "2001:db8:2::5",
		"2001:db8:2::6", "2001:db8:3::1", "2001:db9::1", "fd74:7570:7065::2", "fd74:7570:7065:1::2",
		"fd74:7570:7065:1:1::9", "fd00::1", "fd00::2", "2606:4700::1111", "::ffff:8.8.8.8", "8.8.8.8", "10.20.30.1",
	} {
		probes = append(probes, netip.MustParseAddr(s))
	}
	r := rand.New(rand.NewPCG(3, 4))
	probes = append(probes, randomNear(r, netip.MustParsePrefix("::/0"), 20000)...)
	for _, p := range slices.Concat(forbidden, exempt, pol.AllowNets(), pol.DenyNets()) {
		probes = append(probes, randomNear(r, p, 200)...)
	}
	checkDenialRanges(t, forbidden, exempt, pol, probes)
}

func TestRangeArithmetic(t *testing.T) {
	r := func(lo, hi string) addrRange {
		return addrRange{netip.MustParseAddr(lo), netip.MustParseAddr(hi)}
	}
	all := r("0.0.0.0", "255.255.255.255")
	all6 := r("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	for _, tc := range []struct {
		name string
		got  []addrRange
		want []addrRange
	}{
		{"merge overlapping and adjacent", rangesOf(prefixes("10.0.0.0/8", "10.1.0.0/16", "11.0.0.0/8", "0.0.0.0/0")), []addrRange{all}},
		{"merge keeps gaps", rangesOf(prefixes("10.0.0.0/8", "12.0.0.0/8")), []addrRange{r("10.0.0.0", "10.255.255.255"), r("12.0.0.0", "12.255.255.255")}},
		{"subtract middle", subtractRanges([]addrRange{all}, rangesOf(prefixes("10.0.0.0/8"))), []addrRange{r("0.0.0.0", "9.255.255.255"), r("11.0.0.0", "255.255.255.255")}},
		{"subtract edges", subtractRanges([]addrRange{all}, rangesOf(prefixes("0.0.0.0/8", "255.0.0.0/8"))), []addrRange{r("1.0.0.0", "254.255.255.255")}},
		{"subtract all", subtractRanges(rangesOf(prefixes("10.0.0.0/8")), []addrRange{all}), nil},
		{"intersect", intersectRanges(rangesOf(prefixes("10.0.0.0/8", "12.0.0.0/8")), rangesOf(prefixes("10.5.0.0/16", "12.0.0.0/7"))),
			[]addrRange{r("10.5.0.0", "10.5.255.255"), r("12.0.0.0", "12.255.255.255")}},
		{"families apart, IPv4 first", rangesOf(prefixes("::/0", "0.0.0.0/0", "::ffff:0:0/96")), []addrRange{all, all6}},
		{"IPv6 merge", rangesOf(prefixes("2001:db8::/33", "2001:db8:8000::/33", "2001:db9::/32", "fc00::/7")),
			[]addrRange{r("2001:db8::", "2001:db9:ffff:ffff:ffff:ffff:ffff:ffff"), r("fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"IPv6 subtract edges", subtractRanges([]addrRange{all, all6}, rangesOf(prefixes("::/128", "ffff::/16", "10.0.0.0/8"))),
			[]addrRange{r("0.0.0.0", "9.255.255.255"), r("11.0.0.0", "255.255.255.255"), r("::1", "fffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"IPv6 subtract all", subtractRanges([]addrRange{all, all6}, []addrRange{all6}), []addrRange{all}},
		{"IPv6 subtract middle", subtractRanges([]addrRange{all6}, rangesOf(prefixes("2001:db8::/32"))),
			[]addrRange{r("::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"), r("2001:db9::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"intersect across families", intersectRanges([]addrRange{all}, []addrRange{all6}), nil},
		{"IPv6 intersect", intersectRanges(rangesOf(prefixes("2001:db8::/32", "10.0.0.0/8")), rangesOf(prefixes("2001:db8:5::/48", "::/0", "10.1.0.0/16"))),
			[]addrRange{r("10.1.0.0", "10.1.255.255"), r("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"family", familyRanges(rangesOf(prefixes("::/0", "10.0.0.0/8")), true), []addrRange{all6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got, cmp.AllowUnexported(addrRange{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, tc := range []struct {
		r    addrRange
		want string
	}{
		{all, "0.0.0.0/0"},
		{r("10.0.0.0", "10.255.255.255"), "10.0.0.0/8"},
		{r("10.0.0.1", "10.0.0.1"), "10.0.0.1"},
		{r("10.0.0.1", "10.0.0.2"), "10.0.0.1-10.0.0.2"},
		{r("10.0.0.0", "10.0.0.2"), "10.0.0.0-10.0.0.2"},
		{all6, "::/0"},
		{r("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"), "2001:db8::/32"},
		{r("2001:db8::1", "2001:db8::1"), "2001:db8::1"},
		{r("2001:db8::1", "2001:db8::2"), "2001:db8::1-2001:db8::2"},
		{r("::1", "fffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), "::1-fffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{r("::ffff:0.0.0.0", "::ffff:255.255.255.255"), "0000:0000:0000:0000:0000:ffff:0000:0000/96"},
	} {
		if got := formatRange(tc.r); got != tc.want {
			t.Errorf("formatRange(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestParseDenyPrefix(t *testing.T) {
	for _, tc := range []struct {
		in     string
		hostIf string
		idx    int
		ok     bool
	}{
		{"tpd tp0a1b2c3d4e5f 3", "tp0a1b2c3d4e5f", 3, true},
		{"tpd tp1 0", "tp1", 0, true},
		{"tpd tp1 -1", "", 0, false},
		{"tpd tp1", "", 0, false},
		{"xyz tp1 1", "", 0, false},
		{"tpd tp1 1 2", "", 0, false},
		{"", "", 0, false},
	} {
		hostIf, idx, ok := parseDenyPrefix(tc.in)
		if hostIf != tc.hostIf || idx != tc.idx || ok != tc.ok {
			t.Errorf("parseDenyPrefix(%q) = %q, %d, %v; want %q, %d, %v", tc.in, hostIf, idx, ok, tc.hostIf, tc.idx, tc.ok)
		}
	}
}

func TestParsePacketDst(t *testing.T) {
	v4 := func(proto byte, frag uint16, l4 ...byte) []byte {
		p := make([]byte, 20)
		p[0] = 0x45
		binary.BigEndian.PutUint16(p[6:], frag)
		p[9] = proto
		copy(p[16:], []byte{203, 0, 113, 9})
		return append(p, l4...)
	}
	v6 := func(next byte, rest ...byte) []byte {
		p := make([]byte, 40)
		p[0] = 0x60
		p[6] = next
		copy(p[24:], netip.MustParseAddr("2001:db8::1").AsSlice())
		return append(p, rest...)
	}
	ports := []byte{0x30, 0x39, 0x01, 0xbb} // 12345 -> 443
	hopByHop := append([]byte{6, 0}, make([]byte, 6)...)
	for _, tc := range []struct {
		name  string
		pkt   []byte
		proto string
		dst   string
		ok    bool
	}{
		{"tcp", v4(6, 0, ports...), "tcp", "203.0.113.9:443", true},
		{"udp", v4(17, 0x4000, ports...), "udp", "203.0.113.9:443", true},
		{"later fragment", v4(17, 5, ports...), "udp", "203.0.113.9:0", true},
		{"icmp", v4(1, 0, 8, 0, 0, 0), "icmp", "203.0.113.9:0", true},
		{"cut short", v4(6, 0, 1), "tcp", "203.0.113.9:0", true},
		{"ipv6 tcp", v6(6, ports...), "tcp", "[2001:db8::1]:443", true},
		{"ipv6 hop-by-hop", v6(0, append(hopByHop, ports...)...), "tcp", "[2001:db8::1]:443", true},
		{"ipv6 icmpv6", v6(58, 128, 0), "icmpv6", "[2001:db8::1]:0", true},
		{"garbage", []byte{0x10, 1, 2}, "", "", false},
		{"empty", nil, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proto, dst, ok := parsePacketDst(tc.pkt)
			if ok != tc.ok || proto != tc.proto || (ok && dst.String() != tc.dst) {
				t.Errorf("parsePacketDst = %q, %v, %v; want %q, %s, %v", proto, dst, ok, tc.proto, tc.dst, tc.ok)
			}
		})
	}
}

func TestLogGroupFor(t *testing.T) {
	a, b := logGroupFor("/var/lib/tupper/net"), logGroupFor("/var/lib/tupper/net/")
	if a != b {
		t.Errorf("logGroupFor differs for one directory: %d, %d", a, b)
	}
	if a < 1<<15 {
		t.Errorf("logGroupFor = %d, want at least 32768", a)
	}
	if c := logGroupFor("/tmp/other"); c == a {
		t.Errorf("two directories got group %d", a)
	}
}
