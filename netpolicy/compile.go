package netpolicy

import (
	"net/netip"
	"strings"
)

// Compiled is a normalized Policy in the form decisions are made from. It
// is immutable and safe for concurrent use.
type Compiled struct {
	allowNets    []netip.Prefix
	denyNets     []netip.Prefix
	allowDomains []string // exact names
	allowSuffix  []string // wildcards, as ".example.com"
	rules        map[string][]Rule
}

// Compile compiles p, which must have been normalized; nil compiles to
// "allow everything".
func Compile(p *Policy) *Compiled {
	c := &Compiled{}
	if p == nil {
		return c
	}
	for _, e := range p.AllowOut {
		if n, ok := prefixOf(e); ok {
			c.allowNets = append(c.allowNets, allTraffic(n)...)
		} else if suffix, ok := strings.CutPrefix(e, "*."); ok {
			c.allowSuffix = append(c.allowSuffix, "."+suffix)
		} else {
			c.allowDomains = append(c.allowDomains, e)
		}
	}
	for _, e := range p.DenyOut {
		if n, ok := prefixOf(e); ok {
			c.denyNets = append(c.denyNets, allTraffic(n)...)
		}
	}
	c.rules = p.Clone().Rules // nothing the caller holds
	return c
}

// allTraffic returns n, and with it ::/0 when n is 0.0.0.0/0: E2B's SDKs
// spell "all traffic" as 0.0.0.0/0, and a sandbox that has IPv6 must not
// keep it open because the policy was written for IPv4.
func allTraffic(n netip.Prefix) []netip.Prefix {
	if n.Bits() == 0 && n.Addr().Is4() {
		return []netip.Prefix{n, netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
	}
	return []netip.Prefix{n}
}

func prefixOf(e string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(e); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// AllowNets returns the IP entries of AllowOut.
func (c *Compiled) AllowNets() []netip.Prefix { return c.allowNets }

// DenyNets returns the entries of DenyOut.
func (c *Compiled) DenyNets() []netip.Prefix { return c.denyNets }

// Inspects reports whether connections to ports 80 and 443 must go through
// the egress proxy: the policy names domains or has rules.
func (c *Compiled) Inspects() bool {
	return len(c.allowDomains)+len(c.allowSuffix)+len(c.rules) > 0
}

// Verdict is a decision and the entry that made it, for logs and denial
// reports.
type Verdict struct {
	Allowed bool
	// Rule names what decided: `allowOut "api.example.com"`,
	// `denyOut "0.0.0.0/0"`, "default", or, from the host side,
	// "always denied" or "not allowed by the domain list".
	Rule string
}

// DomainVerdict reports whether name matches an allowOut domain entry.
func (c *Compiled) DomainVerdict(name string) (Verdict, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return Verdict{}, false
	}
	for _, d := range c.allowDomains {
		if d == name {
			return Verdict{Allowed: true, Rule: `allowOut "` + d + `"`}, true
		}
	}
	for _, s := range c.allowSuffix {
		if strings.HasSuffix(name, s) {
			return Verdict{Allowed: true, Rule: `allowOut "*` + s + `"`}, true
		}
	}
	return Verdict{}, false
}

// IPVerdict decides by address alone: an allowOut prefix that holds a
// allows, else a denyOut prefix that holds it denies, else it is allowed.
// The most specific prefix names the rule.
func (c *Compiled) IPVerdict(a netip.Addr) Verdict {
	a = a.Unmap()
	if p, ok := longest(c.allowNets, a); ok {
		return Verdict{Allowed: true, Rule: `allowOut "` + p.String() + `"`}
	}
	if p, ok := longest(c.denyNets, a); ok {
		return Verdict{Allowed: false, Rule: `denyOut "` + p.String() + `"`}
	}
	return Verdict{Allowed: true, Rule: "default"}
}

// NameVerdict decides whether the sandbox's resolver answers a lookup of
// name. A name that a domain entry allows is answered. Otherwise, when
// the policy denies all IPv4 traffic, the lookup is refused, even when
// AllowOut lists addresses: a resolver that forwarded any name would be a
// channel out of the sandbox (a DNS tunnel through the operator's
// resolver). Otherwise the name is answered.
func (c *Compiled) NameVerdict(name string) Verdict {
	if v, ok := c.DomainVerdict(name); ok {
		return v
	}
	if p, denied := c.deniesAll(); denied {
		return Verdict{Allowed: false, Rule: `denyOut "` + p.String() + `" and no allowOut domain matches`}
	}
	return Verdict{Allowed: true, Rule: "default"}
}

// deniesAll reports whether a denyOut entry covers every IPv4 address.
func (c *Compiled) deniesAll() (netip.Prefix, bool) {
	for _, p := range c.denyNets {
		if p.Bits() == 0 && p.Addr().Is4() {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Transform returns the rules for requests to host: those of an exact key,
// else of the longest wildcard key that matches (a wildcard matches
// subdomains at any depth, not the apex). Rule sets are not merged.
func (c *Compiled) Transform(host string) []Rule {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || len(c.rules) == 0 {
		return nil
	}
	if rs, ok := c.rules[host]; ok {
		return rs
	}
	var best string
	for k := range c.rules {
		if s, ok := strings.CutPrefix(k, "*"); ok && strings.HasSuffix(host, s) && len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return nil
	}
	return c.rules[best]
}

func longest(nets []netip.Prefix, a netip.Addr) (netip.Prefix, bool) {
	var best netip.Prefix
	found := false
	for _, p := range nets {
		if p.Contains(a) && (!found || p.Bits() > best.Bits()) {
			best, found = p, true
		}
	}
	return best, found
}
