package cli

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/sdk"
)

func TestServeNetworkFlags(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte("PEM"), 0o644)
	tests := []struct {
		name    string
		flags   networkFlags
		host    backend.NetworkConfig
		policy  *netpolicy.Policy
		wantErr bool
	}{
		{name: "defaults", flags: networkFlags{egress: "allow"}},
		{name: "deny", flags: networkFlags{egress: "deny", allowOut: []string{"PyPI.org"}},
			policy: &netpolicy.Policy{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0", "::/0"}}},
		{name: "off", flags: networkFlags{egress: "off"}, host: backend.NetworkConfig{NoEgress: true}},
		{name: "no ipv6", flags: networkFlags{egress: "allow", noIPv6: true}, host: backend.NetworkConfig{NoIPv6: true}},
		{name: "allow with a deny list", flags: networkFlags{egress: "allow", denyOut: []string{"203.0.113.0/24"}},
			policy: &netpolicy.Policy{DenyOut: []string{"203.0.113.0/24"}}},
		{name: "operator side", flags: networkFlags{egress: "allow", dnsUpstreams: []string{"198.51.100.53", "198.51.100.54:5353"},
			allowInternal: []string{"10.1.2.3", "172.16.0.0/12"}, upstreamCA: ca},
			host: backend.NetworkConfig{DNSUpstreams: []string{"198.51.100.53:53", "198.51.100.54:5353"},
				Exempt: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("172.16.0.0/12")}, UpstreamCAs: []byte("PEM")}},
		{name: "bad egress", flags: networkFlags{egress: "maybe"}, wantErr: true},
		{name: "domain in deny", flags: networkFlags{egress: "allow", denyOut: []string{"example.com"}}, wantErr: true},
		{name: "resolver by name", flags: networkFlags{egress: "allow", dnsUpstreams: []string{"dns.example"}}, wantErr: true},
		{name: "bad internal", flags: networkFlags{egress: "allow", allowInternal: []string{"nope"}}, wantErr: true},
		{name: "missing CA file", flags: networkFlags{egress: "allow", upstreamCA: "/nonexistent/ca.pem"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, policy, err := tt.flags.config()
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.host, host, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
				t.Errorf("host config (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.policy, policy); d != "" {
				t.Errorf("default policy (-want +got):\n%s", d)
			}
		})
	}
}

func TestEgressFlagsPolicy(t *testing.T) {
	e := egressFlags{allowOut: []string{"api.example.com"}, noInternet: true,
		headers: []string{"api.example.com:Authorization: Bearer sk-1", "api.example.com:X-Team:  a:b "}}
	p, internet, err := e.policy()
	if err != nil {
		t.Fatal(err)
	}
	want := &sdk.NetworkPolicy{AllowOut: []string{"api.example.com"}, Rules: map[string][]sdk.NetworkRule{"api.example.com": {
		{Transform: &sdk.NetworkTransform{Headers: map[string]string{"Authorization": "Bearer sk-1"}}},
		{Transform: &sdk.NetworkTransform{Headers: map[string]string{"X-Team": "a:b"}}},
	}}}
	if d := cmp.Diff(want, p); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if internet == nil || *internet {
		t.Errorf("allowInternetAccess = %v, want false", internet)
	}
	for _, bad := range []string{"no-colon", "api.example.com:novalue", ":Name: v"} {
		if _, _, err := (&egressFlags{headers: []string{bad}}).policy(); err == nil {
			t.Errorf("--header %q: no error", bad)
		}
	}
	if (&egressFlags{}).set() {
		t.Error("no flags reports set")
	}
}
