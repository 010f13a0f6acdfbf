package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

func TestNormalize(t *testing.T) {
	hdr := func(k, v string) []Rule { return []Rule{{Transform: &Transform{Headers: map[string]string{k: v}}}} }
	tests := []struct {
		name string
		in   Policy
		want Policy
		err  error
	}{
		{name: "canonical forms",
			in:   Policy{AllowOut: []string{"10.1.2.3/8", "::1", "API.Example.com.", "*.x.io", "::ffff:1.2.3.4"}, DenyOut: []string{"0.0.0.0/0", "fe80::1/64"}},
			want: Policy{AllowOut: []string{"10.0.0.0/8", "::1", "api.example.com", "*.x.io", "1.2.3.4"}, DenyOut: []string{"0.0.0.0/0", "fe80::/64"}}},
		{name: "rule keys lower case", in: Policy{Rules: map[string][]Rule{"API.x.io": hdr("Authorization", "Bearer s")}},
			want: Policy{Rules: map[string][]Rule{"api.x.io": hdr("Authorization", "Bearer s")}}},
		{name: "empty rules", in: Policy{Rules: map[string][]Rule{}}, want: Policy{}},
		{name: "domain in denyOut", in: Policy{DenyOut: []string{"example.com"}}, err: errdefs.ErrInvalidArgument},
		{name: "bad cidr", in: Policy{AllowOut: []string{"1.2.3.4/33"}}, err: errdefs.ErrInvalidArgument},
		{name: "label too long", in: Policy{AllowOut: []string{strings.Repeat("a", 64) + ".com"}}, err: errdefs.ErrInvalidArgument},
		{name: "empty entry", in: Policy{AllowOut: []string{""}}, err: errdefs.ErrInvalidArgument},
		{name: "inner wildcard", in: Policy{AllowOut: []string{"a.*.com"}}, err: errdefs.ErrInvalidArgument},
		{name: "bare star", in: Policy{AllowOut: []string{"*"}}, err: errdefs.ErrInvalidArgument},
		{name: "zone", in: Policy{AllowOut: []string{"fe80::1%eth0"}}, err: errdefs.ErrInvalidArgument},
		{name: "header injection", in: Policy{Rules: map[string][]Rule{"a.io": hdr("X", "v\r\nEvil: 1")}}, err: errdefs.ErrInvalidArgument},
		{name: "bad header name", in: Policy{Rules: map[string][]Rule{"a.io": hdr("Bad Name", "v")}}, err: errdefs.ErrInvalidArgument},
		{name: "same key twice", in: Policy{Rules: map[string][]Rule{"a.io": hdr("X", "1"), "A.io": hdr("X", "2")}}, err: errdefs.ErrInvalidArgument},
		{name: "too many entries", in: Policy{AllowOut: make([]string, MaxEntries+1)}, err: errdefs.ErrInvalidArgument},
		{name: "egress proxy", in: Policy{EgressProxy: []byte(`{"address":"p:1080"}`)}, err: errdefs.ErrNotSupported},
		{name: "null egress proxy", in: Policy{EgressProxy: []byte(`null`)}, want: Policy{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.in.Clone()
			err := p.Normalize()
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("= %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(&tt.want, p); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestWithInternet(t *testing.T) {
	f, tr := false, true
	p := &Policy{AllowOut: []string{"pypi.org"}}
	if got := WithInternet(p, &tr); got != p {
		t.Error("allowInternetAccess true changed the policy")
	}
	got := WithInternet(p, &f)
	if d := cmp.Diff(&Policy{AllowOut: []string{"pypi.org"}, DenyOut: []string{AllTrafficV4, AllTrafficV6}}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if len(p.DenyOut) != 0 {
		t.Error("WithInternet modified its argument")
	}
	if got := WithInternet(nil, &f); len(got.DenyOut) != 2 {
		t.Errorf("WithInternet(nil, false) = %+v", got)
	}
}

// TestVerdicts checks the two decisions a connection is made of: a
// domain entry by Host or SNI (which the egress proxy accepts only at an
// address the name resolves to), else the IP entries.
func TestVerdicts(t *testing.T) {
	p := &Policy{
		AllowOut: []string{"api.allowed.test", "*.wild.test", "198.51.100.0/28", "203.0.113.7"},
		DenyOut:  []string{"0.0.0.0/0", "198.51.100.0/24"},
	}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	c := Compile(p)
	a := netip.MustParseAddr
	tests := []struct {
		name    string
		ip      string
		host    string
		allowed bool
		rule    string
	}{
		{"domain wins over deny", "203.0.113.99", "api.allowed.test", true, `allowOut "api.allowed.test"`},
		{"domain is exact", "203.0.113.99", "x.api.allowed.test", false, `denyOut "0.0.0.0/0"`},
		{"wildcard matches subdomains", "203.0.113.99", "a.b.wild.test", true, `allowOut "*.wild.test"`},
		{"wildcard is not the apex", "203.0.113.99", "wild.test", false, `denyOut "0.0.0.0/0"`},
		{"host case and dot", "203.0.113.99", "API.Allowed.Test.", true, `allowOut "api.allowed.test"`},
		{"allowed range", "198.51.100.3", "", true, `allowOut "198.51.100.0/28"`},
		{"allowed ip", "203.0.113.7", "other.test", true, `allowOut "203.0.113.7/32"`},
		{"most specific deny names the rule", "198.51.100.200", "", false, `denyOut "198.51.100.0/24"`},
		{"deny all", "203.0.113.8", "", false, `denyOut "0.0.0.0/0"`},
		// E2B's "all traffic" is 0.0.0.0/0: it covers IPv6 too.
		{"v6 denied by the deny-all", "2001:db8::1", "", false, `denyOut "::/0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, named := c.DomainVerdict(tt.host)
			if !named {
				v = c.IPVerdict(a(tt.ip))
			}
			if v.Allowed != tt.allowed || v.Rule != tt.rule {
				t.Errorf("%s, %q: %+v, want %v %q", tt.ip, tt.host, v, tt.allowed, tt.rule)
			}
		})
	}
	if !c.Inspects() || Compile(&Policy{DenyOut: []string{"10.0.0.0/8"}}).Inspects() {
		t.Error("Inspects is wrong")
	}
	if v := Compile(nil).IPVerdict(a("203.0.113.1")); !v.Allowed {
		t.Errorf("nil policy denies: %+v", v)
	}
}

func TestNameVerdict(t *testing.T) {
	mk := func(p *Policy) *Compiled {
		if err := p.Normalize(); err != nil {
			t.Fatal(err)
		}
		return Compile(p)
	}
	tests := []struct {
		name    string
		c       *Compiled
		qname   string
		allowed bool
	}{
		{"open policy answers everything", mk(&Policy{}), "anything.test", true},
		{"deny of a range still answers", mk(&Policy{DenyOut: []string{"203.0.113.0/24"}}), "anything.test", true},
		{"deny all refuses", mk(&Policy{DenyOut: []string{"0.0.0.0/0"}}), "other.test", false},
		{"deny all answers an allowed domain", mk(&Policy{AllowOut: []string{"api.allowed.test"}, DenyOut: []string{"0.0.0.0/0"}}), "api.allowed.test", true},
		// Forwarding any name would open a DNS tunnel through the
		// operator's resolver.
		{"deny all with allowed addresses refuses names", mk(&Policy{AllowOut: []string{"198.51.100.10"}, DenyOut: []string{"0.0.0.0/0"}}), "x.test", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.c.NameVerdict(tt.qname)
			if v.Allowed != tt.allowed {
				t.Errorf("NameVerdict(%q) = %+v", tt.qname, v)
			}
			if !v.Allowed && v.Rule == "" {
				t.Error("a refusal names no rule")
			}
		})
	}
}

func TestTransform(t *testing.T) {
	rs := func(v string) []Rule { return []Rule{{Transform: &Transform{Headers: map[string]string{"X": v}}}} }
	p := &Policy{Rules: map[string][]Rule{"api.x.io": rs("exact"), "*.x.io": rs("short"), "*.api.x.io": rs("long")}}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	c := Compile(p)
	for host, want := range map[string]string{"api.x.io": "exact", "a.x.io": "short", "v1.api.x.io": "long", "x.io": "", "evilx.io": ""} {
		got := ""
		if r := c.Transform(host); r != nil {
			got = r[0].Transform.Headers["X"]
		}
		if got != want {
			t.Errorf("Transform(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestAlwaysDenied(t *testing.T) {
	in := func(s string) bool {
		a := netip.MustParseAddr(s)
		for _, p := range AlwaysDenied() {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, s := range []string{"10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "127.0.0.1", "224.0.0.1", "255.255.255.255", "fd00:ec2::254", "fe80::1", "::1", "ff02::1"} {
		if !in(s) {
			t.Errorf("%s is not always denied", s)
		}
	}
	for _, s := range []string{"198.51.100.10", "203.0.113.10", "8.8.8.8", "2001:db8::1"} {
		if in(s) {
			t.Errorf("%s is always denied", s)
		}
	}
}

func TestRedact(t *testing.T) {
	p := &Policy{Rules: map[string][]Rule{"a.io": {{Transform: &Transform{Headers: map[string]string{"Authorization": "Bearer SECRET"}}}}}}
	got := p.Redact()
	if h := got.Rules["a.io"][0].Transform.Headers; h["Authorization"] != Redacted {
		t.Errorf("redacted headers = %v", h)
	}
	if p.Rules["a.io"][0].Transform.Headers["Authorization"] != "Bearer SECRET" {
		t.Error("Redact changed the policy it was given")
	}
	if (*Policy)(nil).Redact() != nil {
		t.Error("a nil policy redacts to something")
	}
}

func TestAllTrafficCoversIPv6(t *testing.T) {
	c := Compile(&Policy{AllowOut: []string{"0.0.0.0/0"}, DenyOut: []string{"2001:db8::/32"}})
	if v := c.IPVerdict(netip.MustParseAddr("2001:db8::1")); !v.Allowed {
		t.Errorf("allowOut 0.0.0.0/0 does not allow IPv6: %+v", v)
	}
	c = Compile(&Policy{DenyOut: []string{"2001:db8::/32"}})
	if v := c.IPVerdict(netip.MustParseAddr("2001:db9::1")); !v.Allowed {
		t.Errorf("an IPv6 deny of one range denies another: %+v", v)
	}
}
