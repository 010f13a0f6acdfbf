package network

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lightbearco/tupper/netpolicy"
)

// testLookup is an egressLookup that knows one sandbox and forbids the
// addresses in forbid.
type testLookup struct {
	sb     *sandboxNet
	forbid map[netip.Addr]bool
}

func (l *testLookup) sandboxAt(src netip.Addr) (*sandboxNet, bool) {
	if src == l.sb.addr {
		return l.sb, true
	}
	return nil, false
}

func (l *testLookup) forbidden(a netip.Addr) bool { return l.forbid[a] }

// testForbidden is a destination the test lookup forbids.
var testForbidden = netip.MustParseAddr("127.0.0.66")

// compilePolicy normalizes and compiles p.
func compilePolicy(t *testing.T, p *netpolicy.Policy) *netpolicy.Compiled {
	t.Helper()
	if err := p.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return netpolicy.Compile(p)
}

// newTestSandbox returns a sandbox at addr (its connections and queries
// come from there) with policy p.
func newTestSandbox(t *testing.T, addr string, p *netpolicy.Policy) (*sandboxNet, *testLookup) {
	t.Helper()
	a := netip.MustParseAddr(addr)
	ep := &Endpoint{
		ID: "sb-test", HostIf: "tptest",
		HostAddr:    netip.PrefixFrom(a.Prev(), 30),
		SandboxAddr: netip.PrefixFrom(a, 30),
	}
	sb := newSandboxNet(ep, compilePolicy(t, p), slog.New(slog.DiscardHandler))
	return sb, &testLookup{sb: sb, forbid: map[netip.Addr]bool{testForbidden: true}}
}

var ignoreTime = cmpopts.IgnoreFields(netpolicy.Denial{}, "Time")

func checkDenials(t *testing.T, sb *sandboxNet, want []netpolicy.Denial) {
	t.Helper()
	if diff := cmp.Diff(want, sb.Denials(), ignoreTime, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("denials (-want +got):\n%s", diff)
	}
}

// proxyEnv is an egress proxy whose every connection claims to be headed
// for dst, with upstream dials of fake destinations sent to real servers.
type proxyEnv struct {
	proxy   *egressProxy
	ca      *authority
	upCA    *authority // the upstream servers' CA
	clients *x509.CertPool
}

func newProxyEnv(t *testing.T, lk egressLookup, dst string, upstreams map[string]string) *proxyEnv {
	t.Helper()
	return newProxyEnvWith(t, lk, dst, upstreams, nil)
}

// newProxyEnvWith is newProxyEnv with edit applied to the proxy's config.
func newProxyEnvWith(t *testing.T, lk egressLookup, dst string, upstreams map[string]string, edit func(*proxyConfig)) *proxyEnv {
	t.Helper()
	ca, err := loadOrCreateAuthority(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	upCA := testUpstreamCA(t)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upCA.CertPEM())
	d := netip.MustParseAddrPort(dst)
	cfg := proxyConfig{
		Addr: "127.0.0.1:0", Lookup: lk, CA: ca, RootCAs: roots,
		OrigDst: func(net.Conn) (netip.AddrPort, error) { return d, nil },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			real, ok := upstreams[addr]
			if !ok {
				return nil, fmt.Errorf("test dial: no upstream for %s", addr)
			}
			var dl net.Dialer
			return dl.DialContext(ctx, network, real)
		},
		// Every name resolves to the destination, but those starting
		// with "elsewhere", which resolve to another address.
		Resolve: func(name string) []netip.Addr {
			if strings.HasPrefix(name, "elsewhere") {
				return []netip.Addr{netip.MustParseAddr("127.0.0.99")}
			}
			return []netip.Addr{d.Addr()}
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := startProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(ca.CertPEM())
	clients.AppendCertsFromPEM(upCA.CertPEM())
	return &proxyEnv{proxy: p, ca: ca, upCA: upCA, clients: clients}
}

var (
	upstreamCAOnce sync.Once
	upstreamCA     *authority
	upstreamCAErr  error
)

// testUpstreamCA returns the CA of the test's upstream servers, which the
// proxy trusts through RootCAs.
func testUpstreamCA(t *testing.T) *authority {
	t.Helper()
	upstreamCAOnce.Do(func() { upstreamCA, _, upstreamCAErr = newAuthority() })
	if upstreamCAErr != nil {
		t.Fatal(upstreamCAErr)
	}
	return upstreamCA
}

func (e *proxyEnv) addr() string { return fmt.Sprintf("127.0.0.1:%d", e.proxy.Port()) }

// client returns an HTTP client whose every connection goes to the proxy,
// as a sandbox's would after DNAT.
func (e *proxyEnv) client() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, e.addr())
			},
			TLSClientConfig: &tls.Config{RootCAs: e.clients},
		},
	}
}

// newUpstreamTLS starts an HTTPS server with certificates of the
// upstream CA for whatever name it is asked.
func newUpstreamTLS(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	upCA := testUpstreamCA(t)
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return upCA.leaf(hi.ServerName)
	}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// echoHost answers with what the upstream saw of the request.
var echoHost = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	fmt.Fprintf(w, "host=%s sni=%s auth=%q extra=%q", r.Host, sni, r.Header.Values("Authorization"), r.Header.Get("X-Extra"))
	if r.Body != nil {
		io.Copy(w, r.Body)
	}
})

func get(t *testing.T, c *http.Client, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// isReset reports whether err is what a client sees of a reset.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func domainsOnly(domains ...string) *netpolicy.Policy {
	return &netpolicy.Policy{AllowOut: domains, DenyOut: []string{netpolicy.AllTrafficV4}}
}

func TestProxyDecides(t *testing.T) {
	tlsUp := newUpstreamTLS(t, echoHost)
	plainUp := httptest.NewServer(echoHost)
	t.Cleanup(plainUp.Close)
	upstreams := map[string]string{
		"127.0.0.10:443": tlsUp.Listener.Addr().String(),
		"127.0.0.20:443": tlsUp.Listener.Addr().String(),
		"127.0.0.10:80":  plainUp.Listener.Addr().String(),
		"127.0.0.20:80":  plainUp.Listener.Addr().String(),
		"127.0.0.66:443": tlsUp.Listener.Addr().String(),
	}
	tests := []struct {
		name     string
		policy   *netpolicy.Policy
		dst      string
		url      string
		wantBody string // empty: the connection must be reset
		denial   *netpolicy.Denial
	}{
		{
			name: "allowed domain by SNI", policy: domainsOnly("api.test"),
			dst: "127.0.0.10:443", url: "https://api.test/", wantBody: `host=api.test sni=api.test auth=[] extra=""`,
		},
		{
			name: "allowed wildcard by SNI", policy: domainsOnly("*.api.test"),
			dst: "127.0.0.10:443", url: "https://v1.api.test/", wantBody: `host=v1.api.test sni=v1.api.test auth=[] extra=""`,
		},
		{
			name: "allowed domain by Host", policy: domainsOnly("api.test"),
			dst: "127.0.0.10:80", url: "http://api.test/", wantBody: `host=api.test sni= auth=[] extra=""`,
		},
		{
			name: "other domain to the same IP by SNI", policy: domainsOnly("api.test"),
			dst: "127.0.0.10:443", url: "https://evil.test/",
			denial: &netpolicy.Denial{Kind: "tls", Protocol: "tcp", Destination: "127.0.0.10:443", Host: "evil.test", Rule: `denyOut "0.0.0.0/0"`},
		},
		{
			name: "other domain to the same IP by Host", policy: domainsOnly("api.test"),
			dst: "127.0.0.10:80", url: "http://evil.test/",
			denial: &netpolicy.Denial{Kind: "http", Protocol: "tcp", Destination: "127.0.0.10:80", Host: "evil.test", Rule: `denyOut "0.0.0.0/0"`},
		},
		{
			name: "IP rule allows when no domain matches", policy: domainsOnly("api.test", "127.0.0.20"),
			dst: "127.0.0.20:443", url: "https://other.test/", wantBody: `host=other.test sni=other.test auth=[] extra=""`,
		},
		{
			name: "IP rule allows plain HTTP", policy: domainsOnly("api.test", "127.0.0.20/32"),
			dst: "127.0.0.20:80", url: "http://other.test/", wantBody: `host=other.test sni= auth=[] extra=""`,
		},
		{
			name: "denyOut address without a domain match", policy: &netpolicy.Policy{AllowOut: []string{"api.test"}, DenyOut: []string{"127.0.0.20"}},
			dst: "127.0.0.20:443", url: "https://other.test/",
			denial: &netpolicy.Denial{Kind: "tls", Protocol: "tcp", Destination: "127.0.0.20:443", Host: "other.test", Rule: `denyOut "127.0.0.20/32"`},
		},
		{
			// An allowed name opens only the addresses it resolves to,
			// not any address a client dials by hand with that name.
			name: "allowed name at an address it does not resolve to", policy: domainsOnly("elsewhere.test"),
			dst: "127.0.0.10:443", url: "https://elsewhere.test/",
			denial: &netpolicy.Denial{Kind: "tls", Protocol: "tcp", Destination: "127.0.0.10:443", Host: "elsewhere.test",
				Rule: `allowOut "elsewhere.test" allows the name, but it does not resolve to 127.0.0.10`},
		},
		{
			name: "allowed name by Host at an address it does not resolve to", policy: domainsOnly("elsewhere.test"),
			dst: "127.0.0.10:80", url: "http://elsewhere.test/",
			denial: &netpolicy.Denial{Kind: "http", Protocol: "tcp", Destination: "127.0.0.10:80", Host: "elsewhere.test",
				Rule: `allowOut "elsewhere.test" allows the name, but it does not resolve to 127.0.0.10`},
		},
		{
			name: "always denied whatever the policy", policy: nil,
			dst: "127.0.0.66:443", url: "https://api.test/",
			denial: &netpolicy.Denial{Kind: "connect", Protocol: "tcp", Destination: "127.0.0.66:443", Rule: "always denied"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, lk := newTestSandbox(t, "127.0.0.1", tt.policy)
			env := newProxyEnv(t, lk, tt.dst, upstreams)
			start := time.Now()
			code, body, err := get(t, env.client(), mustRequest(t, "GET", tt.url, nil))
			if tt.wantBody == "" {
				if err == nil {
					t.Fatalf("request succeeded (%d %q), want a reset", code, body)
				}
				if !isReset(err) {
					t.Errorf("err = %v, want a reset", err)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("refusal took %v", d)
				}
				checkDenials(t, sb, []netpolicy.Denial{*tt.denial})
				return
			}
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if code != http.StatusOK || body != tt.wantBody {
				t.Errorf("got %d %q, want 200 %q", code, body, tt.wantBody)
			}
			checkDenials(t, sb, nil)
		})
	}
}

func TestProxyUnknownSourceIsReset(t *testing.T) {
	_, lk := newTestSandbox(t, "127.0.0.2", nil)
	env := newProxyEnv(t, lk, "127.0.0.10:443", nil)
	_, _, err := get(t, env.client(), mustRequest(t, "GET", "https://api.test/", nil))
	if !isReset(err) {
		t.Errorf("err = %v, want a reset", err)
	}
}

func TestProxyGarbageIsDenied(t *testing.T) {
	for _, port := range []string{"443", "80"} {
		t.Run(port, func(t *testing.T) {
			sb, lk := newTestSandbox(t, "127.0.0.1", domainsOnly("api.test"))
			env := newProxyEnv(t, lk, "127.0.0.10:"+port, nil)
			c, err := net.Dial("tcp", env.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("\x16\x03\x01 this is not what it claims\r\n\r\n"))
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read %d bytes, err %v; want the connection refused", n, err)
			}
			kind := map[string]string{"443": "tls", "80": "http"}[port]
			checkDenials(t, sb, []netpolicy.Denial{{Kind: kind, Protocol: "tcp", Destination: "127.0.0.10:" + port, Rule: ruleNoHost}})
		})
	}
}

func TestProxyHeaderInjection(t *testing.T) {
	up := newUpstreamTLS(t, echoHost)
	pol := domainsOnly("api.test")
	pol.Rules = map[string][]netpolicy.Rule{"api.test": {
		{Transform: &netpolicy.Transform{Headers: map[string]string{"Authorization": "Bearer first"}}},
		{Transform: &netpolicy.Transform{Headers: map[string]string{"authorization": "Bearer secret", "X-Extra": "1"}}},
	}}
	sb, lk := newTestSandbox(t, "127.0.0.1", pol)
	env := newProxyEnv(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": up.Listener.Addr().String()})
	c := env.client()

	var reused []bool
	for i, body := range []string{" body-one", " body-two"} {
		req := mustRequest(t, "POST", "https://api.test/x", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer from-the-sandbox")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `host=api.test sni=api.test auth=["Bearer secret"] extra="1"` + body
		if resp.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("request %d: got %d %q, want 200 %q", i, resp.StatusCode, b, want)
		}
		if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != caName {
			t.Errorf("request %d: served by a certificate of %q, want the egress CA", i, issuer)
		}
		if p := resp.TLS.NegotiatedProtocol; p != "" && p != "http/1.1" {
			t.Errorf("ALPN %q, want http/1.1", p)
		}
	}
	if diff := cmp.Diff([]bool{false, true}, reused); diff != "" {
		t.Errorf("connection reuse (-want +got):\n%s", diff)
	}
	checkDenials(t, sb, nil)
}

func TestProxyStreamsTerminated(t *testing.T) {
	// The upstream answers before the request body ends, and the sandbox
	// sends the rest only once it has read the answer: any buffering of
	// either body would deadlock.
	up := newUpstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		br := bufio.NewReader(r.Body)
		line, _ := br.ReadString('\n')
		fmt.Fprintf(w, "got %s", line)
		w.(http.Flusher).Flush()
		rest, _ := io.ReadAll(br)
		fmt.Fprintf(w, "then %s", rest)
	}))
	pol := domainsOnly("api.test")
	pol.Rules = map[string][]netpolicy.Rule{"api.test": {{Transform: &netpolicy.Transform{Headers: map[string]string{"X-Extra": "1"}}}}}
	_, lk := newTestSandbox(t, "127.0.0.1", pol)
	env := newProxyEnv(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": up.Listener.Addr().String()})

	pr, pw := io.Pipe()
	defer pw.Close()
	req := mustRequest(t, "POST", "https://api.test/stream", pr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.Write([]byte("one\n"))
	}()
	resp, err := env.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "got one\n" {
		t.Fatalf("first part %q, %v", first, err)
	}
	<-done
	pw.Write([]byte("two"))
	pw.Close()
	rest, _ := io.ReadAll(br)
	if string(rest) != "then two" {
		t.Errorf("rest %q, want %q", rest, "then two")
	}
}

func TestProxyRefusesMisdirectedRequest(t *testing.T) {
	var hits int
	up := newUpstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		echoHost(w, r)
	}))
	pol := domainsOnly("api.test", "other.test")
	pol.Rules = map[string][]netpolicy.Rule{"api.test": {{Transform: &netpolicy.Transform{Headers: map[string]string{"Authorization": "Bearer secret"}}}}}
	_, lk := newTestSandbox(t, "127.0.0.1", pol)
	env := newProxyEnv(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": up.Listener.Addr().String()})
	req := mustRequest(t, "GET", "https://api.test/", nil)
	req.Host = "other.test"
	code, _, err := get(t, env.client(), req)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusMisdirectedRequest {
		t.Errorf("status %d, want 421", code)
	}
	if hits != 0 {
		t.Errorf("the upstream got %d requests, want none", hits)
	}
}

func TestProxyPolicyUpdateCutsConnection(t *testing.T) {
	// An upstream that streams a line every 20 ms until the client goes.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(up.Close)
	sb, lk := newTestSandbox(t, "127.0.0.1", domainsOnly("api.test"))
	env := newProxyEnv(t, lk, "127.0.0.10:80", map[string]string{"127.0.0.10:80": up.Listener.Addr().String()})

	c, err := net.Dial("tcp", env.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: api.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := func() error {
		b := make([]byte, 5)
		_, err := io.ReadFull(resp.Body, b)
		return err
	}
	if err := line(); err != nil {
		t.Fatalf("first line: %v", err)
	}

	// An update that still allows it keeps it.
	if n := sb.setPolicy(compilePolicy(t, domainsOnly("api.test", "more.test")), lk.forbidden); n != 0 {
		t.Fatalf("an update that still allows the connection cut %d", n)
	}
	if err := line(); err != nil {
		t.Fatalf("a line after a harmless update: %v", err)
	}

	if n := sb.setPolicy(compilePolicy(t, domainsOnly("other.test")), lk.forbidden); n != 1 {
		t.Fatalf("setPolicy cut %d connections, want 1", n)
	}
	start := time.Now()
	var rerr error
	for rerr == nil && time.Since(start) < 3*time.Second {
		rerr = line()
	}
	if rerr == nil {
		t.Fatal("the stream went on after the cut")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the cut took %v", d)
	}
}

func TestProxyCloseCutsConnections(t *testing.T) {
	up := newUpstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	_, lk := newTestSandbox(t, "127.0.0.1", nil)
	env := newProxyEnv(t, lk, "127.0.0.10:443", map[string]string{"127.0.0.10:443": up.Listener.Addr().String()})
	resp, err := env.client().Do(mustRequest(t, "GET", "https://api.test/", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	closed := make(chan error, 1)
	go func() { closed <- env.proxy.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the response ended cleanly after Close, want it cut")
	}
}

// TestProxyDecidesEveryHTTPRequest sends two requests down one kept-alive
// connection: the second, for a host the policy refuses, must not pass on
// the strength of the first.
func TestProxyDecidesEveryHTTPRequest(t *testing.T) {
	var hosts []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	sb, lk := newTestSandbox(t, "127.0.0.1", domainsOnly("api.test"))
	env := newProxyEnv(t, lk, "127.0.0.10:80", map[string]string{"127.0.0.10:80": up.Listener.Addr().String()})
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(env.proxy.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Both requests in one write, as a smuggling client would send them.
	io.WriteString(c, "GET /first HTTP/1.1\r\nHost: api.test\r\n\r\nGET /second HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, first.Body)
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, second.Body)
	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusForbidden {
		t.Errorf("statuses %d, %d; want 200, 403", first.StatusCode, second.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hosts, []string{"api.test"}) {
		t.Errorf("the upstream saw hosts %q, want only api.test", hosts)
	}
	checkDenials(t, sb, []netpolicy.Denial{{Kind: "http", Protocol: "tcp", Destination: "127.0.0.10:80", Host: "evil.test", Rule: `denyOut "0.0.0.0/0"`}})
}

// TestProxyConnectionCap checks that one sandbox cannot hold more than
// maxProxiedConns connections of the proxy at once.
func TestProxyConnectionCap(t *testing.T) {
	sb, _ := newTestSandbox(t, "127.0.0.1", nil)
	for range maxProxiedConns {
		if !sb.acquire() {
			t.Fatal("a connection under the cap was refused")
		}
	}
	if sb.acquire() {
		t.Fatal("a connection over the cap was admitted")
	}
	sb.release()
	if !sb.acquire() {
		t.Fatal("a released slot was not given again")
	}
}

// TestBindingsAreBounded checks that a resolver answering a new address
// every time cannot grow what a sandbox remembers without end.
func TestBindingsAreBounded(t *testing.T) {
	sb, _ := newTestSandbox(t, "127.0.0.1", domainsOnly("*.evil.test"))
	for i := range 1000 {
		sb.bind("a.evil.test", []netip.Addr{netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})})
	}
	if n := len(sb.bindings["a.evil.test"]); n > maxAddrsPerName {
		t.Errorf("%d addresses remembered for one name, want at most %d", n, maxAddrsPerName)
	}
	if !sb.boundTo("a.evil.test", netip.AddrFrom4([4]byte{198, 51, 3, 231})) {
		t.Error("the newest answer was forgotten")
	}
}

// TestDenialLogIsPaced checks that a sandbox looping on a refused name
// fills its own record, not the daemon's log.
func TestDenialLogIsPaced(t *testing.T) {
	var buf bytes.Buffer
	ep := &Endpoint{ID: "sb-log", HostIf: "tplog", HostAddr: netip.MustParsePrefix("10.213.9.1/30"), SandboxAddr: netip.MustParsePrefix("10.213.9.2/30")}
	sb := newSandboxNet(ep, compilePolicy(t, nil), slog.New(slog.NewTextHandler(&buf, nil)))
	for range 500 {
		sb.deny(netpolicy.Denial{Kind: "dns", Destination: "refused.test", Rule: "r"})
	}
	if lines := strings.Count(buf.String(), "egress denied"); lines > denialLogBurst+1 {
		t.Errorf("%d log lines for 500 denials in a moment, want at most about %d", lines, denialLogBurst)
	}
	if got := len(sb.Denials()); got != maxDenials {
		t.Errorf("the record holds %d denials, want the last %d", got, maxDenials)
	}
}
