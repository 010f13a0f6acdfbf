package network

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// A rule's header may use secrets (netpolicy.SecretRef): the proxy asks
// its SecretResolver for each value as it sends each request, and nowhere
// else, so that a value is never in the sandbox, the lease or the logs,
// and a secret updated or deleted takes effect at the next request. A
// reference that does not resolve (the secret was deleted, or the daemon
// resolves none) fails the request with 502 before anything is sent: the
// upstream never gets the request without its credentials, nor the
// reference's text.
//
// Headers go only where the rule's host really is: a connection whose
// SNI names a host with rules is terminated only at an address that the
// host resolves to (the sandbox's resolver's answer, else the daemon's own
// lookup), so that a sandbox cannot dial an address of its choosing with
// that name and collect the headers there; the upstream's certificate
// must be valid for the name too, and each request's Host must be it.

// SecretResolver returns the value of secret id for a request of sandbox
// sandbox. It fails with errdefs.ErrNotFound when the secret does not
// exist or is not the sandbox's team's; its errors never hold a value.
type SecretResolver func(ctx context.Context, sandbox, id string) (string, error)

// ruleHeadersKey carries, on a request's context, the headers its rules
// set, resolved.
type ruleHeadersKey struct{}

// ruleHeaders returns the headers that sb's current rules for host set,
// with the secrets they use resolved. Its errors say which header failed
// and why, and are fit to show the sandbox: they hold no value and no
// secret's id.
func (p *egressProxy) ruleHeaders(ctx context.Context, sb *sandboxNet, host string) (http.Header, error) {
	h := http.Header{}
	for _, r := range sb.Policy().Transform(host) {
		if r.Transform == nil {
			continue
		}
		for k, v := range r.Transform.Headers {
			if netpolicy.HasSecretRef(v) {
				var err error
				v, err = netpolicy.ExpandSecretRefs(v, func(id string) (string, error) {
					return p.secretValue(ctx, sb, host, k, id)
				})
				if err != nil {
					return nil, err
				}
			}
			h.Set(k, v)
		}
	}
	return h, nil
}

// secretValue resolves secret id, which header of the rules for host uses.
func (p *egressProxy) secretValue(ctx context.Context, sb *sandboxNet, host, header, id string) (string, error) {
	if p.secrets == nil {
		return "", fmt.Errorf("header %s of the rules for %s uses a secret, and this daemon resolves none", header, host)
	}
	v, err := p.secrets(ctx, sb.id, id)
	if err != nil {
		sb.log.Warn("egress proxy: a rule's secret did not resolve", "op", "egress-proxy", "host", host, "header", header, "secret", id, "err", err)
		if errdefs.IsNotFound(err) {
			return "", fmt.Errorf("the secret that header %s of the rules for %s uses no longer exists", header, host)
		}
		return "", fmt.Errorf("the secret that header %s of the rules for %s uses could not be read", header, host)
	}
	if !validHeaderValue(v) {
		// The secret store refuses such values; this keeps a request
		// from being split whatever the resolver returns.
		return "", fmt.Errorf("the secret that header %s of the rules for %s uses is not a valid header value", header, host)
	}
	return v, nil
}

// validHeaderValue reports whether v may be sent as an HTTP header value:
// no control character but the tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// serveWithRuleHeaders answers a request whose rules' headers do not
// resolve with 502, and sends any other through next with the headers on
// its context for the rewrite (withRuleHeaders) to set.
func (p *egressProxy) serveWithRuleHeaders(w http.ResponseWriter, r *http.Request, sb *sandboxNet, dst netip.AddrPort, host string, next http.Handler) {
	h, err := p.ruleHeaders(r.Context(), sb, host)
	if err != nil {
		sb.deny(netpolicy.Denial{Kind: "tls", Protocol: "tcp", Destination: dst.String(), Host: host, Rule: err.Error()})
		http.Error(w, "tupper: "+err.Error()+": the request was not sent", http.StatusBadGateway)
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ruleHeadersKey{}, h)))
}

// withRuleHeaders sets on out the headers that serveWithRuleHeaders put on
// the context of in, replacing any of the same name.
func withRuleHeaders(in, out *http.Request) {
	h, _ := in.Context().Value(ruleHeadersKey{}).(http.Header)
	for k, vs := range h {
		out.Header[k] = vs
	}
}

// resolvesTo reports whether host resolves to a for sb: by an answer its
// resolver gave the sandbox, or else by the daemon's own lookup (resolve,
// when not nil), whose answer is remembered.
func (s *sandboxNet) resolvesTo(host string, a netip.Addr, resolve func(string) []netip.Addr) bool {
	if s.boundTo(host, a) {
		return true
	}
	if resolve == nil {
		return false
	}
	s.bind(host, resolve(canonicalHost(host)))
	return s.boundTo(host, a)
}
