package network

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// testSecrets is a SecretResolver over a map of values by id, which a
// test may change; it records who asked.
type testSecrets struct {
	mu     sync.Mutex
	values map[string]string
	asked  []string // "sandbox/id"
}

func (s *testSecrets) resolve(ctx context.Context, sandbox, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, sandbox+"/"+id)
	v, ok := s.values[id]
	if !ok {
		return "", fmt.Errorf("secret %q: %w", id, errdefs.ErrNotFound)
	}
	return v, nil
}

func (s *testSecrets) set(id, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == "" {
		delete(s.values, id)
	} else {
		s.values[id] = v
	}
}

func (s *testSecrets) askedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asked)
}

// countingEcho is echoHost that counts the requests it gets.
type countingEcho struct {
	mu   sync.Mutex
	hits int
}

func (c *countingEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.hits++
	c.mu.Unlock()
	echoHost(w, r)
}

func (c *countingEcho) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// secretPolicy has one rule for host whose Authorization uses the secret
// sec_1; hosts named in allow are allowed, everything else denied.
func secretPolicy(host string, allow ...string) *netpolicy.Policy {
	p := &netpolicy.Policy{AllowOut: allow}
	if len(allow) > 0 {
		p.DenyOut = []string{netpolicy.AllTrafficV4}
	}
	p.Rules = map[string][]netpolicy.Rule{host: {{Transform: &netpolicy.Transform{Headers: map[string]string{
		"Authorization": "Bearer " + netpolicy.SecretRef("sec_1"), "X-Extra": "plain",
	}}}}}
	return p
}

func TestProxyResolvesSecrets(t *testing.T) {
	up := &countingEcho{}
	tlsUp := newUpstreamTLS(t, up)
	secrets := &testSecrets{values: map[string]string{"sec_1": "sk-one"}}
	sb, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("api.test", "api.test"))
	env := newProxyEnvWith(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": tlsUp.Listener.Addr().String()},
		func(c *proxyConfig) { c.Secrets = secrets.resolve })
	c := env.client()

	// The value as it is at each request: an update is seen on the same
	// connection, at the next request.
	for i, want := range []string{"sk-one", "sk-two"} {
		if i == 1 {
			secrets.set("sec_1", "sk-two")
		}
		req := mustRequest(t, "GET", "https://api.test/", nil)
		req.Header.Set("Authorization", "Bearer from-the-sandbox")
		code, body, err := get(t, c, req)
		if err != nil {
			t.Fatal(err)
		}
		if w := fmt.Sprintf(`host=api.test sni=api.test auth=["Bearer %s"] extra="plain"`, want); code != http.StatusOK || body != w {
			t.Errorf("request %d: %d %q, want 200 %q", i, code, body, w)
		}
	}
	if got := secrets.asked; len(got) != 2 || got[0] != "sb-test/sec_1" {
		t.Errorf("the resolver was asked %q, want sb-test/sec_1 once a request", got)
	}

	// A deleted secret fails the request before anything is sent, and
	// the answer names neither the value nor the reference.
	secrets.set("sec_1", "")
	code, body, err := get(t, c, mustRequest(t, "GET", "https://api.test/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusBadGateway || !strings.Contains(body, "no longer exists") {
		t.Errorf("with the secret deleted: %d %q, want 502 saying it no longer exists", code, body)
	}
	for _, leak := range []string{"sk-", "sec_1", "${"} {
		if strings.Contains(body, leak) {
			t.Errorf("the refusal holds %q: %q", leak, body)
		}
	}
	if up.count() != 2 {
		t.Errorf("the upstream got %d requests, want the 2 before the delete", up.count())
	}
	checkDenials(t, sb, []netpolicy.Denial{{Kind: "tls", Protocol: "tcp", Destination: "127.0.0.10:443", Host: "api.test",
		Rule: "the secret that header Authorization of the rules for api.test uses no longer exists"}})
}

func TestProxySecretFailuresSendNothing(t *testing.T) {
	tests := []struct {
		name    string
		secrets SecretResolver
		want    string
	}{
		{name: "no resolver", want: "resolves none"},
		{name: "resolver error", want: "could not be read",
			secrets: func(context.Context, string, string) (string, error) { return "", fmt.Errorf("disk on fire") }},
		{name: "value that would split the request", want: "not a valid header value",
			secrets: func(context.Context, string, string) (string, error) { return "sk\r\nX-Injected: 1", nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &countingEcho{}
			tlsUp := newUpstreamTLS(t, up)
			_, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("api.test", "api.test"))
			env := newProxyEnvWith(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": tlsUp.Listener.Addr().String()},
				func(c *proxyConfig) { c.Secrets = tt.secrets })
			code, body, err := get(t, env.client(), mustRequest(t, "GET", "https://api.test/", nil))
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusBadGateway || !strings.Contains(body, tt.want) {
				t.Errorf("%d %q, want 502 saying %q", code, body, tt.want)
			}
			if strings.Contains(body, "disk on fire") || strings.Contains(body, "X-Injected") {
				t.Errorf("the refusal passes on what the resolver said: %q", body)
			}
			if up.count() != 0 {
				t.Errorf("the upstream got %d requests", up.count())
			}
		})
	}
}

// TestProxyRuleHeadersStayWithTheirHost checks that a sandbox cannot
// collect a rule's headers elsewhere: not by dialling an address of its
// choosing with the rule's host as SNI (even where the policy lets it
// reach that address), not by naming another Host on a connection
// terminated for the rule's host, and not from a server whose certificate
// is not valid for the name.
func TestProxyRuleHeadersStayWithTheirHost(t *testing.T) {
	t.Run("an address the host does not resolve to", func(t *testing.T) {
		up := &countingEcho{}
		tlsUp := newUpstreamTLS(t, up)
		res := &testSecrets{values: map[string]string{"sec_1": "sk-one"}}
		// No allowOut: every address is open, but elsewhere.test resolves
		// to 127.0.0.99, not to the 127.0.0.10 that the sandbox dials.
		sb, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("elsewhere.test"))
		env := newProxyEnvWith(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": tlsUp.Listener.Addr().String()},
			func(c *proxyConfig) { c.Secrets = res.resolve })
		_, _, err := get(t, env.client(), mustRequest(t, "GET", "https://elsewhere.test/", nil))
		if err == nil || !isReset(err) {
			t.Errorf("err = %v, want a reset", err)
		}
		if up.count() != 0 || res.askedCount() != 0 {
			t.Errorf("the upstream got %d requests and the resolver was asked %d times, want none", up.count(), res.askedCount())
		}
		checkDenials(t, sb, []netpolicy.Denial{{Kind: "tls", Protocol: "tcp", Destination: "127.0.0.10:443", Host: "elsewhere.test",
			Rule: "the rules for elsewhere.test add headers only at the addresses it resolves to"}})
	})

	t.Run("another Host on the connection", func(t *testing.T) {
		up := &countingEcho{}
		tlsUp := newUpstreamTLS(t, up)
		res := &testSecrets{values: map[string]string{"sec_1": "sk-one"}}
		_, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("api.test", "api.test", "evil.test"))
		env := newProxyEnvWith(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": tlsUp.Listener.Addr().String()},
			func(c *proxyConfig) { c.Secrets = res.resolve })
		req := mustRequest(t, "GET", "https://api.test/", nil)
		req.Host = "evil.test"
		code, body, err := get(t, env.client(), req)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusMisdirectedRequest || strings.Contains(body, "sk-one") {
			t.Errorf("%d %q, want 421 without the value", code, body)
		}
		if up.count() != 0 || res.askedCount() != 0 {
			t.Errorf("the upstream got %d requests and the resolver was asked %d times, want none", up.count(), res.askedCount())
		}
	})

	t.Run("a certificate not valid for the name", func(t *testing.T) {
		rogue, _, err := newAuthority()
		if err != nil {
			t.Fatal(err)
		}
		up := &countingEcho{}
		s := httptest.NewUnstartedServer(up)
		s.TLS = &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return rogue.leaf(hi.ServerName) }}
		s.StartTLS()
		t.Cleanup(s.Close)
		res := &testSecrets{values: map[string]string{"sec_1": "sk-one"}}
		_, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("api.test", "api.test"))
		env := newProxyEnvWith(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": s.Listener.Addr().String()},
			func(c *proxyConfig) { c.Secrets = res.resolve })
		code, body, err := get(t, env.client(), mustRequest(t, "GET", "https://api.test/", nil))
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusBadGateway || strings.Contains(body, "sk-one") {
			t.Errorf("%d %q, want 502 without the value", code, body)
		}
		if up.count() != 0 {
			t.Errorf("a server with a rogue certificate got %d requests", up.count())
		}
	})
}

// TestDNSBindsRuleNames checks that the sandbox's resolver remembers its
// answers for a name that has rules, though no allowOut entry names it:
// the proxy adds the rules' headers at those addresses without a lookup
// of its own, whose answer may differ (round-robin DNS).
func TestDNSBindsRuleNames(t *testing.T) {
	_, up := startTestZone(t)
	sb, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("outside.test"))
	d := startTestDNS(t, lk, up)
	if r := dnsQuery(t, d.Port(), "127.0.0.1", "udp", "outside.test", dns.TypeA, 1232); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	if !sb.resolvesTo("outside.test", netip.MustParseAddr("198.51.100.7"), nil) {
		t.Error("the answer for a name with rules is not remembered")
	}
	if sb.resolvesTo("outside.test", netip.MustParseAddr("198.51.100.8"), nil) {
		t.Error("an address the answer did not hold is taken for the name's")
	}
}

// TestProxyNoRuleHeadersOverPlainHTTP checks that rules apply to HTTPS
// alone: a plain HTTP request to the rule's host goes out as the sandbox
// sent it, without resolving any secret.
func TestProxyNoRuleHeadersOverPlainHTTP(t *testing.T) {
	plainUp := httptest.NewServer(echoHost)
	t.Cleanup(plainUp.Close)
	res := &testSecrets{values: map[string]string{"sec_1": "sk-one"}}
	_, lk := newTestSandbox(t, "127.0.0.1", secretPolicy("api.test", "api.test"))
	env := newProxyEnvWith(t, lk, "127.0.0.10:80", map[string]string{"127.0.0.10:80": plainUp.Listener.Addr().String()},
		func(c *proxyConfig) { c.Secrets = res.resolve })
	code, body, err := get(t, env.client(), mustRequest(t, "GET", "http://api.test/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := `host=api.test sni= auth=[] extra=""`; code != http.StatusOK || body != want {
		t.Errorf("%d %q, want 200 %q", code, body, want)
	}
	if res.askedCount() != 0 {
		t.Errorf("the resolver was asked %d times for a plain HTTP request", res.askedCount())
	}
}
