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
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

const (
	// proxyPeekTimeout bounds the wait for a connection's TLS ClientHello
	// or HTTP request head, and for the TLS handshake when the proxy
	// terminates TLS.
	proxyPeekTimeout = 10 * time.Second
	// proxyDialTimeout bounds the default upstream dial.
	proxyDialTimeout = 10 * time.Second
	// proxyIdleTimeout closes a terminated connection idle this long
	// between requests.
	proxyIdleTimeout = 2 * time.Minute
	// maxHelloBytes and maxHTTPHeadBytes bound what the proxy reads
	// before it decides.
	maxHelloBytes    = 16 << 10
	maxHTTPHeadBytes = 64 << 10
	// ruleNoHost is the denial rule for a connection that names no host
	// the proxy can read.
	ruleNoHost = "no TLS SNI or HTTP Host"
)

// proxyConfig configures the egress proxy.
type proxyConfig struct {
	// Addr is the listen address, e.g. "127.0.0.1:0".
	Addr string
	// Lookup maps a connection's source address to its sandbox. Required.
	Lookup egressLookup
	// CA mints the leaf certificates for TLS termination. Required.
	CA *authority
	// RootCAs verifies upstream servers; nil means the host's system roots.
	RootCAs *x509.CertPool
	// OrigDst returns the destination the sandbox dialled; nil means
	// SO_ORIGINAL_DST (Linux, after DNAT). Tests inject their own.
	OrigDst func(c net.Conn) (netip.AddrPort, error)
	// Dial dials upstream; nil means a net.Dialer with a 10 s timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolve returns the IPv4 addresses of a name, for a connection that
	// names an allowed host the sandbox never looked up through its
	// resolver; nil means such connections are decided by address only.
	Resolve func(name string) []netip.Addr
	// Secrets resolves the secrets that rules' headers use; nil means
	// none resolves, and requests whose rules use one fail.
	Secrets SecretResolver
	// Logger receives the proxy's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports what is missing from c.
func (c *proxyConfig) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("egress proxy: no listen address: %w", errdefs.ErrInvalidArgument)
	case c.Lookup == nil:
		return fmt.Errorf("egress proxy: no sandbox lookup: %w", errdefs.ErrInvalidArgument)
	case c.CA == nil:
		return fmt.Errorf("egress proxy: no certificate authority: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// egressProxy is the transparent proxy that sandboxes' TCP connections to
// ports 80 and 443 are redirected to when their policy names domains or
// transforms requests. It reads the HTTP Host or TLS SNI of each
// connection, decides it by the sandbox's policy, and either resets it or
// carries it: spliced byte for byte, or, for HTTPS to a host whose
// requests the policy transforms, terminated with a leaf of the CA so that
// the headers can be set. It is safe for concurrent use.
type egressProxy struct {
	ln      net.Listener
	lookup  egressLookup
	ca      *authority
	rootCAs *x509.CertPool
	origDst func(net.Conn) (netip.AddrPort, error)
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	resolve func(string) []netip.Addr
	secrets SecretResolver
	log     *slog.Logger
	// ctx ends when the proxy closes; upstream dials and requests use it.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	sets   map[*connSet]struct{}
	wg     sync.WaitGroup // the accept loop and every connection's handler
}

// startProxy starts the proxy on cfg.Addr. It is listening when it returns.
func startProxy(cfg proxyConfig) (*egressProxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := &egressProxy{
		ln: ln, lookup: cfg.Lookup, ca: cfg.CA, rootCAs: cfg.RootCAs,
		origDst: cfg.OrigDst, dial: cfg.Dial, resolve: cfg.Resolve, secrets: cfg.Secrets, log: cfg.Logger,
		sets: map[*connSet]struct{}{},
	}
	if p.origDst == nil {
		p.origDst = originalDst
	}
	if p.dial == nil {
		p.dial = (&net.Dialer{Timeout: proxyDialTimeout}).DialContext
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.log = p.log.With("op", "egress-proxy")
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Port returns the port the proxy listens on.
func (p *egressProxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// Close stops accepting, cuts every connection the proxy carries and
// waits for their handlers to end.
func (p *egressProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	sets := make([]*connSet, 0, len(p.sets))
	for s := range p.sets {
		sets = append(sets, s)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, s := range sets {
		s.close(true)
	}
	p.wg.Wait()
	return err
}

func (p *egressProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			p.log.Warn("accept failed", "err", err)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		set := &connSet{conns: []net.Conn{c}}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			rstClose(c)
			return
		}
		p.sets[set] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				delete(p.sets, set)
				p.mu.Unlock()
			}()
			defer set.close(false)
			p.handle(c, set)
		}()
	}
}

// handle decides one connection and carries it if it is allowed. set
// holds c and every upstream connection dialled for it.
func (p *egressProxy) handle(c net.Conn, set *connSet) {
	sb, ok := p.lookup.sandboxAt(connAddr(c.RemoteAddr()))
	if !ok {
		set.close(true)
		return
	}
	dst, err := p.origDst(c)
	if err != nil {
		sb.log.Warn("egress proxy: no original destination", "op", "egress-proxy", "err", err)
		set.close(true)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if !sb.acquire() {
		sb.deny(netpolicy.Denial{Kind: "connect", Protocol: "tcp", Destination: dst.String(),
			Rule: fmt.Sprintf("more than %d connections through the egress proxy at once", maxProxiedConns)})
		set.close(true)
		return
	}
	defer sb.release()
	if p.lookup.forbidden(dst.Addr()) {
		sb.deny(netpolicy.Denial{Kind: "connect", Protocol: "tcp", Destination: dst.String(), Rule: "always denied"})
		set.close(true)
		return
	}
	kind := "tls"
	if dst.Port() == 80 {
		kind = "http"
	}
	c.SetReadDeadline(time.Now().Add(proxyPeekTimeout))
	var peeked []byte
	var host string
	if kind == "http" {
		peeked, host, err = peekHTTPHost(c)
	} else {
		peeked, host, err = peekSNI(c)
	}
	c.SetReadDeadline(time.Time{})
	if err != nil {
		if len(peeked) > 0 || !errors.Is(err, io.EOF) {
			// A client that closes before saying anything has asked for
			// nothing; anything else is a refusal worth reporting.
			sb.deny(netpolicy.Denial{Kind: kind, Protocol: "tcp", Destination: dst.String(), Rule: ruleNoHost})
		}
		set.close(true)
		return
	}
	// Track before deciding: a policy update that lands in between then
	// either is seen by Decide or cuts the connection.
	untrack := sb.track(&proxiedConn{dst: dst, host: host, close: func() { set.close(true) }})
	defer untrack()
	pol := sb.Policy()
	if v := sb.decide(pol, dst.Addr(), host, p.resolve); !v.Allowed {
		sb.deny(netpolicy.Denial{Kind: kind, Protocol: "tcp", Destination: dst.String(), Host: host, Rule: v.Rule})
		set.close(true)
		return
	}
	switch {
	case kind == "tls" && host != "" && len(pol.Transform(host)) > 0:
		// A rule's headers go only to where its host is (proxy_secrets.go).
		if !sb.resolvesTo(host, dst.Addr(), p.resolve) {
			sb.deny(netpolicy.Denial{Kind: kind, Protocol: "tcp", Destination: dst.String(), Host: host,
				Rule: "the rules for " + host + " add headers only at the addresses it resolves to"})
			set.close(true)
			return
		}
		p.terminate(c, set, sb, dst, host, peeked)
	case kind == "http":
		// Every request on the connection is decided, not only the
		// first: keep-alive must not carry a request for another host.
		p.serveHTTP(c, set, sb, dst, peeked)
	default:
		p.splice(c, set, sb, dst, peeked)
	}
}

// splice dials dst, replays what was peeked and copies both ways until
// both sides have finished, passing on each half-close.
func (p *egressProxy) splice(c net.Conn, set *connSet, sb *sandboxNet, dst netip.AddrPort, peeked []byte) {
	up, err := p.dial(p.ctx, "tcp", dst.String())
	if err != nil {
		sb.log.Debug("egress proxy: upstream dial failed", "op", "egress-proxy", "destination", dst.String(), "err", err)
		set.close(true)
		return
	}
	if !set.add(up) {
		return
	}
	if _, err := up.Write(peeked); err != nil {
		set.close(true)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(up, c, set)
	}()
	pipe(c, up, set)
	<-done
}

// pipe copies src to dst and then half-closes dst; an error cuts the whole
// connection, so that neither side waits on a dead peer.
func pipe(dst, src net.Conn, set *connSet) {
	if _, err := io.Copy(dst, src); err != nil {
		set.close(true)
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// terminate serves the connection as the TLS server for sni, with a leaf
// of the CA, and forwards each HTTP/1.1 request to https://sni at dst with
// the policy's headers set.
func (p *egressProxy) terminate(c net.Conn, set *connSet, sb *sandboxNet, dst netip.AddrPort, sni string, peeked []byte) {
	tc := tls.Server(&replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(peeked), c)}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.ca.leaf(sni)
		},
	})
	hctx, cancel := context.WithTimeout(p.ctx, proxyPeekTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		sb.log.Debug("egress proxy: TLS handshake with sandbox failed", "op", "egress-proxy", "host", sni, "err", err)
		return
	}
	tr := p.upstreamTransport(set, dst, &tls.Config{
		ServerName: sni,
		RootCAs:    p.rootCAs,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	defer tr.CloseIdleConnections()
	p.serveRequests(tc, p.transformHandler(sb, dst, sni, tr))
}

// serveHTTP serves a plain HTTP connection to dst request by request,
// deciding each one's Host: a request for a host the policy does not
// allow at dst is answered 403 and ends the connection.
func (p *egressProxy) serveHTTP(c net.Conn, set *connSet, sb *sandboxNet, dst netip.AddrPort, peeked []byte) {
	tr := p.upstreamTransport(set, dst, nil)
	defer tr.CloseIdleConnections()
	rp := p.reverseProxy(sb, dst, tr, func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme = "http"
		pr.Out.URL.Host = dst.String()
		pr.Out.Host = pr.In.Host
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostOnly(r.Host)
		if v := sb.decide(sb.Policy(), dst.Addr(), host, p.resolve); !v.Allowed {
			sb.deny(netpolicy.Denial{Kind: "http", Protocol: "tcp", Destination: dst.String(), Host: host, Rule: v.Rule})
			w.Header().Set("Connection", "close")
			http.Error(w, "tupper: the sandbox's network policy does not allow "+host, http.StatusForbidden)
			return
		}
		http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
	p.serveRequests(&replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(peeked), c)}, h)
}

// upstreamTransport returns a transport whose every connection goes to
// dst, never to a fresh resolution of the request's host: the policy
// allowed this address, and a rule's headers go nowhere else. tlsConfig
// nil means plain HTTP. Connections join set, so that a cut ends them.
func (p *egressProxy) upstreamTransport(set *connSet, dst netip.AddrPort, tlsConfig *tls.Config) *http.Transport {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			up, err := p.dial(ctx, "tcp", dst.String())
			if err != nil {
				return nil, err
			}
			if !set.add(up) {
				return nil, net.ErrClosed
			}
			return up, nil
		},
		DisableCompression: true, // pass encodings through untouched
		IdleConnTimeout:    proxyIdleTimeout,
		// One upstream connection per sandbox connection, as if spliced.
		MaxConnsPerHost: 1,
	}
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
		tr.TLSHandshakeTimeout = proxyPeekTimeout
	}
	return tr
}

// reverseProxy returns a streaming reverse proxy over tr that keeps the
// forwarding headers the sandbox sent (and adds none) and rewrites each
// request with rewrite.
func (p *egressProxy) reverseProxy(sb *sandboxNet, dst netip.AddrPort, tr http.RoundTripper, rewrite func(*httputil.ProxyRequest)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Be transparent: keep what the sandbox sent of these, which
			// Rewrite strips.
			for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[h]; ok {
					pr.Out.Header[h] = v
				}
			}
			rewrite(pr)
		},
		Transport:     tr,
		FlushInterval: -1, // stream: never hold back a server-sent event
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			sb.log.Info("egress proxy: upstream request failed", "op", "egress-proxy",
				"destination", dst.String(), "host", hostOnly(r.Host), "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
}

// serveRequests serves HTTP/1.1 on the one connection c with h until c
// ends or the proxy closes.
func (p *egressProxy) serveRequests(c net.Conn, h http.Handler) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	ln := newOneConnListener(c, p.ln.Addr())
	srv := &http.Server{
		Handler:           h,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       proxyIdleTimeout,
	}
	go srv.Serve(ln)
	<-ln.done
	srv.Close()
}

// transformHandler forwards requests for sni to dst with the headers of
// the sandbox's current rules for sni, their secrets resolved; requests
// for any other host are refused, so that a connection terminated for one
// host cannot carry requests, and so headers, to another.
func (p *egressProxy) transformHandler(sb *sandboxNet, dst netip.AddrPort, sni string, tr http.RoundTripper) http.Handler {
	urlHost := sni
	if dst.Port() != 443 {
		urlHost = net.JoinHostPort(sni, strconv.Itoa(int(dst.Port())))
	}
	rp := p.reverseProxy(sb, dst, tr, func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme = "https"
		pr.Out.URL.Host = urlHost
		pr.Out.Host = ""
		withRuleHeaders(pr.In, pr.Out)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hostOnly(r.Host) != sni {
			http.Error(w, "misdirected request: this connection serves "+sni+" only", http.StatusMisdirectedRequest)
			return
		}
		// Stream both ways at once: by default the server would read the
		// whole request body before the response could start.
		http.NewResponseController(w).EnableFullDuplex()
		p.serveWithRuleHeaders(w, r, sb, dst, sni, rp)
	})
}

// peekSNI reads c's TLS ClientHello and returns every byte read and the
// server name, lower case; empty when the client sent none.
func peekSNI(c net.Conn) ([]byte, string, error) {
	rec := &recordingConn{Conn: c, limit: maxHelloBytes}
	var (
		sni  string
		seen bool
	)
	errSeen := errors.New("client hello read")
	err := tls.Server(rec, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, seen = h.ServerName, true
			return nil, errSeen
		},
	}).Handshake()
	if seen {
		return rec.buf, hostOnly(sni), nil
	}
	if err == nil {
		err = errors.New("no TLS ClientHello")
	}
	return rec.buf, "", err
}

// peekHTTPHost reads c's HTTP request head and returns every byte read
// and the Host without its port, lower case; empty when the request names
// none.
func peekHTTPHost(c net.Conn) ([]byte, string, error) {
	buf := make([]byte, 0, 4096)
	end := -1
	for end < 0 {
		if len(buf) >= maxHTTPHeadBytes {
			return buf, "", fmt.Errorf("HTTP request head longer than %d bytes", maxHTTPHeadBytes)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		from := max(len(buf)-3, 0)
		n, err := c.Read(buf[len(buf):min(cap(buf), maxHTTPHeadBytes)])
		buf = buf[:len(buf)+n]
		if i := bytes.Index(buf[from:], []byte("\r\n\r\n")); i >= 0 {
			end = from + i + 4
		} else if err != nil {
			return buf, "", err
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:end])))
	if err != nil {
		return buf, "", err
	}
	return buf, hostOnly(req.Host), nil
}

// hostOnly returns the host of a Host header or server name: no port, no
// brackets, no trailing dot, lower case.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// connAddr returns the IP of a TCP address, unmapped.
func connAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// connSet is the connections that make up one proxied connection: the
// sandbox's and those dialled upstream for it. Closing it closes them all,
// once; a connection added after that is closed at once.
type connSet struct {
	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

// add adds c and reports whether the set is still open; if not, c is
// closed.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return false
	}
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return true
}

// close closes every connection of the set, with a reset when reset is
// true (a cut or a refusal) and orderly otherwise (both sides are done,
// and a reset could discard data still in flight).
func (s *connSet) close(reset bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		if reset {
			rstClose(c)
		} else {
			c.Close()
		}
	}
}

// recordingConn keeps every byte read through it, up to limit, and
// swallows writes: peekSNI lets crypto/tls parse a ClientHello through
// it without answering the client.
type recordingConn struct {
	net.Conn
	buf   []byte
	limit int
}

func (r *recordingConn) Read(b []byte) (int, error) {
	room := r.limit - len(r.buf)
	if room <= 0 {
		return 0, fmt.Errorf("TLS ClientHello longer than %d bytes", r.limit)
	}
	if len(b) > room {
		b = b[:room]
	}
	n, err := r.Conn.Read(b)
	r.buf = append(r.buf, b[:n]...)
	return n, err
}

func (r *recordingConn) Write(b []byte) (int, error) { return len(b), nil }

// replayConn reads from r, which replays what was peeked before the rest
// of the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConnListener hands out one connection, then blocks until that
// connection is closed: http.Server serves a single terminated connection
// through it, and done tells when the connection has ended, whether the
// server closed it or a handler that hijacked it did.
type oneConnListener struct {
	mu   sync.Mutex
	conn net.Conn
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func newOneConnListener(c net.Conn, addr net.Addr) *oneConnListener {
	l := &oneConnListener{addr: addr, done: make(chan struct{})}
	l.conn = &closeNotifyConn{Conn: c, l: l}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

// closeNotifyConn closes its listener when it is closed.
type closeNotifyConn struct {
	net.Conn
	l *oneConnListener
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.l.Close()
	return err
}
