package cli

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/spf13/pflag"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// networkFlags are the daemon's networking flags: the default egress policy
// of sandboxes and the operator's side that no sandbox changes.
type networkFlags struct {
	egress        string
	allowOut      []string
	denyOut       []string
	dnsUpstreams  []string
	allowInternal []string
	upstreamCA    string
	noIPv6        bool
}

func (n *networkFlags) register(f *pflag.FlagSet) {
	f.StringVar(&n.egress, "egress", "allow", `default egress of sandboxes whose create says nothing of it: "allow" (the internet, as in E2B), "deny" (nothing until a create or update allows it), or "off" (no network beyond the daemon for any sandbox, whatever it asks)`)
	f.StringSliceVar(&n.allowOut, "allow-out", nil, "default allowOut entry (CIDR, IP, domain or *.domain) of sandboxes whose create says nothing of egress; repeatable")
	f.StringSliceVar(&n.denyOut, "deny-out", nil, "default denyOut entry (CIDR or IP); repeatable")
	f.StringSliceVar(&n.dnsUpstreams, "dns-upstream", nil, "resolver (host or host:port) that sandbox lookups are forwarded to; repeatable (default: the host's, from /etc/resolv.conf)")
	f.StringSliceVar(&n.allowInternal, "allow-internal", nil, "CIDR or IP that sandboxes may reach although it is private, link-local or the host's own (a package mirror, say); each sandbox's policy still applies; repeatable")
	f.BoolVar(&n.noIPv6, "no-ipv6", false, "keep sandboxes on IPv4 even where the host has an IPv6 route out (by default they get IPv6 egress, through NAT, when it does)")
	f.StringVar(&n.upstreamCA, "upstream-ca", "", "PEM file of CA certificates, beside the system's, that the egress proxy trusts when it adds a network rule's headers to a sandbox's HTTPS requests")
}

// config turns the flags into the backend's network settings and the
// engine's default policy.
func (n *networkFlags) config() (backend.NetworkConfig, *netpolicy.Policy, error) {
	hc := backend.NetworkConfig{NoIPv6: n.noIPv6}
	var def *netpolicy.Policy
	switch n.egress {
	case "allow":
	case "deny":
		def = &netpolicy.Policy{DenyOut: []string{netpolicy.AllTrafficV4, netpolicy.AllTrafficV6}}
	case "off":
		hc.NoEgress = true
	default:
		return hc, nil, fmt.Errorf(`--egress %q: want "allow", "deny" or "off": %w`, n.egress, errdefs.ErrInvalidArgument)
	}
	if len(n.allowOut)+len(n.denyOut) > 0 {
		if def == nil {
			def = &netpolicy.Policy{}
		}
		def.AllowOut = append(def.AllowOut, n.allowOut...)
		def.DenyOut = append(def.DenyOut, n.denyOut...)
		if err := def.Normalize(); err != nil {
			return hc, nil, fmt.Errorf("--allow-out/--deny-out: %w", err)
		}
	}
	for _, u := range n.dnsUpstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			u = net.JoinHostPort(u, "53")
		}
		host, _, _ := net.SplitHostPort(u)
		if _, err := netip.ParseAddr(host); err != nil {
			return hc, nil, fmt.Errorf("--dns-upstream %q: want an IP address, with an optional port: %w", u, errdefs.ErrInvalidArgument)
		}
		hc.DNSUpstreams = append(hc.DNSUpstreams, u)
	}
	for _, e := range n.allowInternal {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			a, aerr := netip.ParseAddr(e)
			if aerr != nil {
				return hc, nil, fmt.Errorf("--allow-internal %q: want a CIDR block or an IP address: %w", e, errdefs.ErrInvalidArgument)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		hc.Exempt = append(hc.Exempt, p.Masked())
	}
	if n.upstreamCA != "" {
		pem, err := os.ReadFile(n.upstreamCA)
		if err != nil {
			return hc, nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		hc.UpstreamCAs = pem
	}
	return hc, def, nil
}
