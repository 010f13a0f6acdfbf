// Package netpolicy is a sandbox's egress policy: the E2B `network` field as
// the API carries it, checked and normalized, and compiled into the
// decisions that the firewall, the DNS server and the egress proxy make.
//
// The rules, as E2B documents them and Tupper enforces them:
//
//   - AllowOut lists CIDR blocks, IPs, domain names and "*.domain"
//     wildcards (which match subdomains at any depth, not the apex).
//   - DenyOut lists CIDR blocks and IPs; "0.0.0.0/0" (and "::/0") deny
//     everything that AllowOut does not name.
//   - An allowed entry wins over a denied one; what neither names is
//     allowed.
//   - Domain entries are matched against the HTTP Host (port 80) and the
//     TLS SNI (port 443) of a connection; every other port follows the IP
//     entries alone.
//   - Rules are per-domain request transforms (headers to set) for HTTPS;
//     they grant no access on their own.
//
// Whatever a policy says, a sandbox never reaches the destinations of
// AlwaysDenied (the host, private and shared ranges, link-local and
// metadata addresses, multicast) unless the operator exempts them.
//
// The package is a leaf: it imports nothing of Tupper's but errdefs, so
// that the engine, the backends, the server and the SDK can all share it.
package netpolicy

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// Limits on a policy's size: far above real use, low enough that a
// hostile create cannot make the firewall or the proxy slow.
const (
	MaxEntries        = 1024
	MaxRules          = 256
	MaxHeadersPerRule = 64
	MaxHeaderBytes    = 16 << 10
)

// Policy is a sandbox's network settings as the E2B API carries them
// (shared/specs/e2b-wire.md §7). The zero value allows all egress.
type Policy struct {
	// AllowOut lists CIDR blocks, IPs or domain names ("example.com",
	// "*.example.com") the sandbox may reach; it wins over DenyOut.
	AllowOut []string `json:"allowOut,omitempty"`
	// DenyOut lists CIDR blocks or IPs the sandbox may not reach;
	// "0.0.0.0/0" blocks all egress.
	DenyOut []string `json:"denyOut,omitempty"`
	// Rules are per-domain transforms of outbound HTTPS requests, keyed
	// by a domain name or a "*.domain" wildcard.
	Rules map[string][]Rule `json:"rules,omitempty"`
	// AllowPublicTraffic, when false, makes the sandbox's exposed ports
	// need its traffic access token. Nil means true. It is about who
	// reaches the sandbox, not egress, and an update keeps it.
	AllowPublicTraffic *bool `json:"allowPublicTraffic,omitempty"`
	// MaskRequestHost rewrites the Host header of requests to exposed
	// ports; kept and reported, not applied yet.
	MaskRequestHost *string `json:"maskRequestHost,omitempty"`
	// EgressProxy is E2B's SOCKS5 tunnel for egress. Tupper does not
	// offer it, as E2B's own open-source runtime does not: Normalize
	// refuses a policy that sets it.
	EgressProxy json.RawMessage `json:"egressProxy,omitempty"`
}

// Rule is one transform applied to requests for a domain.
type Rule struct {
	Transform *Transform `json:"transform,omitempty"`
}

// Transform says how a matching request changes on its way out.
type Transform struct {
	// Headers are set on the request, replacing any of the same name.
	Headers map[string]string `json:"headers,omitempty"`
}

// AllTrafficV4 and AllTrafficV6 are the denyOut entries that block all
// egress of a family.
const (
	AllTrafficV4 = "0.0.0.0/0"
	AllTrafficV6 = "::/0"
)

// Clone returns a deep copy of p; nil stays nil.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	c := *p
	c.AllowOut = slices.Clone(p.AllowOut)
	c.DenyOut = slices.Clone(p.DenyOut)
	c.EgressProxy = slices.Clone(p.EgressProxy)
	if p.Rules != nil {
		c.Rules = make(map[string][]Rule, len(p.Rules))
		for k, rs := range p.Rules {
			out := make([]Rule, len(rs))
			for i, r := range rs {
				if r.Transform != nil {
					t := Transform{Headers: maps.Clone(r.Transform.Headers)}
					out[i].Transform = &t
				}
			}
			c.Rules[k] = out
		}
	}
	if p.AllowPublicTraffic != nil {
		v := *p.AllowPublicTraffic
		c.AllowPublicTraffic = &v
	}
	if p.MaskRequestHost != nil {
		v := *p.MaskRequestHost
		c.MaskRequestHost = &v
	}
	return &c
}

// WithInternet returns p as it applies when the create or update also said
// allowInternetAccess: false means "deny all" (both families) on top of p,
// as E2B defines it; nil or true changes nothing. p is not modified.
func WithInternet(p *Policy, internet *bool) *Policy {
	if internet == nil || *internet {
		return p
	}
	out := p.Clone()
	if out == nil {
		out = &Policy{}
	}
	for _, all := range []string{AllTrafficV4, AllTrafficV6} {
		if !slices.Contains(out.DenyOut, all) {
			out.DenyOut = append(out.DenyOut, all)
		}
	}
	return out
}

// Normalize checks p and rewrites its entries in canonical form: prefixes
// masked, IPs bare, domain names lower case without a trailing dot, rule
// keys likewise. Its errors are of class errdefs.ErrInvalidArgument and
// name the entry at fault.
func (p *Policy) Normalize() error {
	if p == nil {
		return nil
	}
	if t := strings.TrimSpace(string(p.EgressProxy)); t != "" && t != "null" {
		return fmt.Errorf("network.egressProxy: tunnelling egress through a SOCKS5 proxy is not supported by Tupper: %w", errdefs.ErrNotSupported)
	}
	p.EgressProxy = nil
	if len(p.AllowOut)+len(p.DenyOut) > MaxEntries {
		return fmt.Errorf("network: at most %d allowOut and denyOut entries: %w", MaxEntries, errdefs.ErrInvalidArgument)
	}
	for i, e := range p.AllowOut {
		norm, err := entry(e, true)
		if err != nil {
			return fmt.Errorf("network.allowOut[%d]: %w", i, err)
		}
		p.AllowOut[i] = norm
	}
	for i, e := range p.DenyOut {
		norm, err := entry(e, false)
		if err != nil {
			return fmt.Errorf("network.denyOut[%d]: %w", i, err)
		}
		p.DenyOut[i] = norm
	}
	if len(p.Rules) > MaxRules {
		return fmt.Errorf("network.rules: at most %d domains: %w", MaxRules, errdefs.ErrInvalidArgument)
	}
	if len(p.Rules) == 0 {
		p.Rules = nil
	}
	rules := make(map[string][]Rule, len(p.Rules))
	for k, rs := range p.Rules {
		name, err := domain(k)
		if err != nil {
			return fmt.Errorf("network.rules[%q]: %w", k, err)
		}
		size := 0
		for i, r := range rs {
			if r.Transform == nil {
				continue
			}
			if len(r.Transform.Headers) > MaxHeadersPerRule {
				return fmt.Errorf("network.rules[%q][%d]: at most %d headers: %w", k, i, MaxHeadersPerRule, errdefs.ErrInvalidArgument)
			}
			for h, v := range r.Transform.Headers {
				if !validHeaderName(h) {
					return fmt.Errorf("network.rules[%q][%d]: %q is not a valid HTTP header name: %w", k, i, h, errdefs.ErrInvalidArgument)
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return fmt.Errorf("network.rules[%q][%d]: the value of header %q holds a line break or NUL: %w", k, i, h, errdefs.ErrInvalidArgument)
				}
				size += len(h) + len(v)
			}
		}
		if size > MaxHeaderBytes {
			return fmt.Errorf("network.rules[%q]: headers larger than %d bytes: %w", k, MaxHeaderBytes, errdefs.ErrInvalidArgument)
		}
		if _, dup := rules[name]; dup {
			return fmt.Errorf("network.rules: %q is given twice: %w", name, errdefs.ErrInvalidArgument)
		}
		rules[name] = rs
	}
	if p.Rules != nil {
		p.Rules = rules
	}
	return nil
}

// entry checks one allowOut or denyOut entry: a CIDR block, an IP, or,
// where domains are allowed, a domain name with an optional "*." prefix.
// It returns the entry in canonical form.
func entry(e string, domains bool) (string, error) {
	if p, err := netip.ParsePrefix(e); err == nil {
		return p.Masked().String(), nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("%q: addresses with a zone are not allowed: %w", e, errdefs.ErrInvalidArgument)
		}
		return a.Unmap().String(), nil
	}
	if !domains {
		return "", fmt.Errorf("%q is not a CIDR block or an IP address (denyOut takes no domain names): %w", e, errdefs.ErrInvalidArgument)
	}
	name, err := domain(e)
	if err != nil {
		return "", fmt.Errorf("%q is not a CIDR block, an IP address or a domain name: %w", e, errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// domain checks a domain name or "*.domain" wildcard and returns it lower
// case without a trailing dot.
func domain(e string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(e, "."))
	if name == "*" {
		return "", fmt.Errorf("a bare \"*\" is not a domain (deny nothing instead): %w", errdefs.ErrInvalidArgument)
	}
	if !ValidDomain(strings.TrimPrefix(name, "*.")) {
		return "", fmt.Errorf("%q is not a domain name: %w", e, errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// ValidDomain reports whether name is a DNS name: dot-separated labels of
// letters, digits, inner hyphens and underscores, at most 253 characters.
func ValidDomain(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// validHeaderName reports whether h is an HTTP field name (RFC 9110 token).
func validHeaderName(h string) bool {
	if h == "" || len(h) > 256 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Redacted is the value that stands for a rule's header value wherever a
// policy is shown rather than enforced.
const Redacted = "[redacted]"

// Redact returns a copy of p whose rules' header values are replaced by
// Redacted: the names stay, so that a caller sees which headers are set,
// but the secrets are never shown again once given.
func (p *Policy) Redact() *Policy {
	c := p.Clone()
	if c == nil {
		return nil
	}
	for _, rs := range c.Rules {
		for _, r := range rs {
			if r.Transform != nil {
				for k := range r.Transform.Headers {
					r.Transform.Headers[k] = Redacted
				}
			}
		}
	}
	return c
}
