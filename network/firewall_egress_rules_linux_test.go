package network

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
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
		name   string
		guard  bool
		want   []string
		unwant []string
	}{
		{
			name: "no guard",
			want: []string{
				`add element inet tupper sbxif { "tp*" }`,
				"add map inet tupper sbxfwd { type ifname : verdict; }",
				"add rule inet tupper input iifname @sbxif ct status dnat ip daddr 127.0.0.1 accept",
				"add rule inet tupper input iifname @sbxif goto refuse",
				"add rule inet tupper forward oifname @sbxif drop",
				"add rule inet tupper forward iifname @sbxif tcp flags syn tcp option maxseg size set rt mtu",
				"add rule inet tupper forward iifname @sbxif iifname vmap @sbxfwd",
				"add rule inet tupper prerouting iifname @sbxif iifname vmap @sbxpre",
				"add rule inet tupper postrouting iifname @sbxif oifname != @sbxif masquerade",
			},
			unwant: []string{"iifname != @sbxif oifname != @sbxif drop", "flush map", "flush set"},
		},
		{
			name:  "guard",
			guard: true,
			want:  []string{"add rule inet tupper forward iifname != @sbxif oifname != @sbxif drop"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firewallRules("tp", tc.guard)
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
		unwant    []string
	}{
		{
			name:      "allow all, no log",
			wantNames: []string{ruleAlwaysDenied, ruleIPv6},
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
			wantNames: []string{ruleAlwaysDenied, `denyOut "0.0.0.0/0"`, `denyOut "198.51.100.0/24"`, ruleIPv6},
			want: []string{
				"add rule inet tupper f_tpabc ip daddr { 0.0.0.0-203.0.113.6, 203.0.113.8-255.255.255.255 } goto d_tpabc",
				`add rule inet tupper d_tpabc ip daddr { 10.0.0.0/8, 127.0.0.0/8 } limit rate 20/second log group 40001 prefix "tpd tpabc 0" comment "always denied"`,
				`add rule inet tupper d_tpabc ip daddr { 198.51.100.0/24 } limit rate 20/second log group 40001 prefix "tpd tpabc 2" comment "denyOut '198.51.100.0/24'"`,
				`add rule inet tupper d_tpabc meta nfproto ipv6 limit rate 20/second log group 40001 prefix "tpd tpabc 3" comment "IPv6 egress is not supported"`,
				"add rule inet tupper n_tpabc meta nfproto ipv4 ip saddr 10.213.4.2 tcp dport { 80, 443 } ip daddr != { 10.0.0.0/8, 127.0.0.0/8 } dnat ip to 127.0.0.1:8080",
			},
		},
		{
			name: "exempt lifts forbidden, policy still denies",
			modify: func(fw *sandboxFirewall) {
				fw.Exempt = prefixes("10.1.0.0/16", "10.2.0.0/16")
				fw.Policy = compile(t, &netpolicy.Policy{DenyOut: []string{"10.2.3.0/24"}})
				fw.LogGroup = 7
				fw.DNSPort = 0
			},
			wantNames: []string{ruleAlwaysDenied, `denyOut "10.2.3.0/24"`, ruleIPv6},
			want: []string{
				"add rule inet tupper f_tpabc ip daddr { 10.0.0.0/16, 10.2.3.0/24, 10.3.0.0-10.255.255.255, 127.0.0.0/8 } goto d_tpabc",
				`prefix "tpd tpabc 1"`,
			},
			unwant: []string{"dport 53", "127.0.0.1:8080"},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := sandboxRules(&tc.fw); err == nil {
				t.Error("sandboxRules accepted it")
			}
		})
	}
}

// TestComputeDenialsMatchesPolicy checks the ranges the firewall denies
// against a direct reading of the rules: Exempt lifts Forbidden, then
// netpolicy's IPVerdict decides and names the rule.
func TestComputeDenialsMatchesPolicy(t *testing.T) {
	forbidden := append(netpolicy.AlwaysDenied(), prefixes("192.0.2.2/32", "192.0.2.0/24")...)
	exempt := prefixes("10.20.0.0/16", "169.254.169.254/32")
	pol := compile(t, &netpolicy.Policy{
		AllowOut: []string{"203.0.113.0/25", "10.20.30.0/24", "8.8.8.8", "api.example.com"},
		DenyOut:  []string{"0.0.0.0/0", "203.0.113.0/24", "203.0.113.0/24", "10.20.0.0/16", "8.0.0.0/7", "::/0"},
	})
	d := computeDenials(forbidden, exempt, pol.AllowNets(), pol.DenyNets())
	want := []string{ruleAlwaysDenied, `denyOut "0.0.0.0/0"`, `denyOut "203.0.113.0/24"`, `denyOut "10.20.0.0/16"`, `denyOut "8.0.0.0/7"`, ruleIPv6}
	if diff := cmp.Diff(want, d.names); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
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
	gotRule := func(a netip.Addr) string {
		v := addrToUint(a)
		found := ""
		for i, rs := range d.byRule {
			for _, r := range rs {
				if r.lo <= v && v <= r.hi {
					if found != "" {
						t.Errorf("%s is in rule %q and rule %q", a, found, d.names[i])
					}
					found = d.names[i]
				}
			}
		}
		inAll := false
		for _, r := range d.all() {
			inAll = inAll || (r.lo <= v && v <= r.hi)
		}
		if inAll != (found != "") {
			t.Errorf("%s: in the forward chain's set %v, in a rule's %q", a, inAll, found)
		}
		return found
	}
	var probes []netip.Addr
	for _, s := range []string{
		"0.0.0.0", "255.255.255.255", "10.20.30.1", "10.20.31.1", "10.21.0.1", "169.254.169.254",
		"169.254.169.253", "203.0.113.1", "203.0.113.200", "8.8.8.8", "8.8.8.9", "9.255.255.255",
		"192.0.2.1", "1.1.1.1", "127.0.0.1", "198.51.100.1",
	} {
		probes = append(probes, netip.MustParseAddr(s))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		probes = append(probes, netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, r.Uint32()))))
	}
	// Edges of every prefix involved.
	for _, p := range append(append(append(forbidden, exempt...), pol.AllowNets()...), pol.DenyNets()...) {
		if !p.Addr().Is4() {
			continue
		}
		rs := rangesOf([]netip.Prefix{p})
		for _, v := range []uint32{rs[0].lo - 1, rs[0].lo, rs[0].hi, rs[0].hi + 1} {
			probes = append(probes, uintToAddr(v))
		}
	}
	for _, a := range probes {
		if got, want := gotRule(a), wantRule(a); got != want {
			t.Errorf("%s: denied by %q, want %q", a, got, want)
		}
	}
}

func TestRangeArithmetic(t *testing.T) {
	r := func(lo, hi string) addrRange {
		return addrRange{addrToUint(netip.MustParseAddr(lo)), addrToUint(netip.MustParseAddr(hi))}
	}
	all := r("0.0.0.0", "255.255.255.255")
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
		{"IPv6 ignored", rangesOf(prefixes("::/0")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got, cmp.AllowUnexported(addrRange{})); diff != "" {
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
