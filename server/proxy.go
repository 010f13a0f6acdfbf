package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
)

// The data plane: requests for a sandbox are checked here and then
// reverse-proxied, bodies streamed both ways and every write flushed at
// once, so that Connect streams (process output, keepalives, watch
// events) reach the client as the agent produces them.

// proxyTarget is where a data-plane request goes; it rides in the request's
// context from the routing code to the proxy's Rewrite.
type proxyTarget struct {
	sandboxID string
	port      int // inside the sandbox
	// agent is set when port is the sandbox's agent's.
	agent bool
	// ownServer is set when port is served by Tupper's own code in the
	// sandbox (the code interpreter), which may see the envd token.
	ownServer bool
	// keepHost keeps the client's Host header, for requests to the
	// sandbox's own servers through getHost(port).
	keepHost bool
}

type targetKey struct{}

// stripAPIKeys removes every header value that carries a Tupper API key,
// whatever the header ("Authorization: Bearer e2b_…", which /mcp accepts,
// or any other): a key opens the control plane, and a server in a sandbox
// must never learn one.
func stripAPIKeys(h http.Header) {
	for name, vals := range h {
		kept := vals[:0]
		for _, v := range vals {
			if !carriesAPIKey(v) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			delete(h, name)
		} else {
			h[name] = kept
		}
	}
}

// carriesAPIKey reports whether v holds a Tupper API key anywhere, as
// it is or percent-encoded: "e2b_" and 40 lower-case hex digits, whatever
// stands around them.
func carriesAPIKey(v string) bool {
	for rest := v; ; {
		i := strings.Index(rest, auth.KeyPrefix)
		if i < 0 {
			return false
		}
		rest = rest[i+len(auth.KeyPrefix):]
		if len(rest) >= apiKeyHexLen && isLowerHex(rest[:apiKeyHexLen]) {
			return true
		}
	}
}

// apiKeyHexLen is how many hex digits follow auth.KeyPrefix in a key.
const apiKeyHexLen = 40

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// stripAPIKeysFromQuery removes the query parameters whose name or value
// carries an API key.
func stripAPIKeysFromQuery(u *url.URL) {
	if !strings.Contains(u.RawQuery, auth.KeyPrefix) {
		return
	}
	q := u.Query()
	for k, vs := range q {
		if carriesAPIKey(k) || slices.ContainsFunc(vs, carriesAPIKey) {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
}

func (s *Server) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*proxyTarget)
			pr.Out.URL.Scheme = "http"
			// The engine dials this name (see engine.SandboxAddr); the
			// sandbox's server sees a Host it would also see from a
			// browser inside the sandbox.
			pr.Out.URL.Host = engine.SandboxAddr(t.sandboxID, t.port)
			pr.Out.Host = "localhost:" + strconv.Itoa(t.port)
			if t.keepHost {
				pr.Out.Host = pr.In.Host
				pr.SetXForwarded()
			}
			for _, h := range routingHeaders {
				pr.Out.Header.Del(h)
			}
			stripAPIKeys(pr.Out.Header)
			stripAPIKeysFromQuery(pr.Out.URL)
			if !t.agent && !t.ownServer {
				// The envd token opens the agent, which runs commands as
				// root: a server of the sandbox's own must never see it.
				// Tupper's code interpreter checks it on /execute, where
				// E2B's SDKs send it.
				pr.Out.Header.Del(headerAccessToken)
			}
		},
		Transport: s.agents,
		// Flush every write: streams must not wait in a buffer.
		FlushInterval: -1,
		ErrorHandler:  s.proxyError,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// forward proxies r to t, full duplex (see fullduplex.go). The request
// ends when the sandbox stops running: the engine cuts the connections it
// dialed into it.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, t *proxyTarget) {
	out := r.WithContext(context.WithValue(r.Context(), targetKey{}, t))
	if body := enableFullDuplex(w, r); body != nil {
		body.fill = t.agent && r.Method == http.MethodPost && r.URL.Path == "/files"
		out.Body = body
		defer body.finish(w)
	}
	s.proxy.ServeHTTP(w, out)
}

// proxyError answers a request the proxy could not complete. Once the
// response has started there is nothing to answer: the stream just ends
// (the proxy aborts the connection, so that the client sees it cut).
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(*proxyTarget)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		s.log.Debug("client went away", "sandbox", t.sandboxID, "path", r.URL.Path)
		return
	}
	if _, lerr := s.lookup(r.Context(), t.sandboxID); isNotFound(lerr) {
		s.log.Debug("sandbox stopped during a request", "sandbox", t.sandboxID, "path", r.URL.Path)
		writeDataError(w, r, http.StatusBadGateway, fmt.Sprintf("sandbox %s stopped running during the request: it was killed or timed out", t.sandboxID))
		return
	}
	var msg string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) && t.agent:
		msg = fmt.Sprintf("sandbox %s: its agent (port %d) is not running: the sandbox has died or is being killed", t.sandboxID, t.port)
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("sandbox %s: nothing listens on port %d inside the sandbox", t.sandboxID, t.port)
	case isTimeout(err):
		msg = fmt.Sprintf("sandbox %s: port %d did not answer in time: the sandbox may be stuck or dead", t.sandboxID, t.port)
	default:
		msg = fmt.Sprintf("sandbox %s: cannot reach port %d: %v", t.sandboxID, t.port, err)
	}
	s.log.Warn("data plane request failed", "sandbox", t.sandboxID, "path", r.URL.Path, "err", err)
	writeDataError(w, r, http.StatusBadGateway, msg)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serveHeaderRouted serves a request carrying E2b-Sandbox-Id: the SDKs'
// envd calls (port 49983) and the code interpreter's (49999).
func (s *Server) serveHeaderRouted(w http.ResponseWriter, r *http.Request, id string) {
	port, err := sandboxPort(r)
	if err != nil {
		writeDataError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	s.serveSandbox(w, r, id, port, false)
}

// serveHostRouted serves a request whose Host names a sandbox port.
func (s *Server) serveHostRouted(w http.ResponseWriter, r *http.Request, t hostTarget) {
	s.serveSandbox(w, r, t.id, t.port, true)
}

// serveSandbox checks a request for port of sandbox id and proxies it.
func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request, id string, port int, byHost bool) {
	if port == agentPort {
		if status, msg := checkAgentPath(r.URL.Path); status != 0 {
			writeDataError(w, r, status, msg)
			return
		}
	}
	sb, err := s.lookup(r.Context(), id)
	if err == nil && s.foreignKey(r, sb) {
		err = errUnknownSandbox(id)
	}
	if err != nil {
		s.sandboxGone(w, r, id, err)
		return
	}
	if port == agentPort {
		err = s.authorizeAgent(r, sb)
	} else {
		err = s.authorizePort(r, sb)
	}
	if err != nil {
		writeDataError(w, r, http.StatusUnauthorized, err.Error())
		return
	}
	s.forward(w, r, &proxyTarget{
		sandboxID: id, port: port, agent: port == agentPort,
		ownServer: sb.CodeInterpreterPort != 0 && port == sb.CodeInterpreterPort,
		keepHost:  byHost && port != agentPort,
	})
}

// sandboxGone answers a data-plane request for a sandbox the engine does
// not run. It is 502 on every path, as E2B's proxy answers: the SDKs read
// 502 (and Connect's "unavailable") as "the sandbox is not running",
// whereas a 404 would read as "file not found" or "unimplemented".
func (s *Server) sandboxGone(w http.ResponseWriter, r *http.Request, id string, err error) {
	if !isNotFound(err) {
		s.log.Error("look up sandbox", "sandbox", id, "err", err)
		writeDataError(w, r, statusOf(err), fmt.Sprintf("sandbox %s: %v", id, err))
		return
	}
	writeDataError(w, r, http.StatusBadGateway, fmt.Sprintf("sandbox %s is not running: it is unknown, was killed or timed out", id))
}

// authorizeAgent checks a request for the agent's port. The agent checks
// again; this check keeps requests without the sandbox's own token from
// reaching it at all. /health stays open, as on the agent, and /files
// also takes a URL signed with the token.
func (s *Server) authorizeAgent(r *http.Request, sb *engine.Sandbox) error {
	got, has := r.Header[http.CanonicalHeaderKey(headerAccessToken)]
	if has {
		if len(got) != 1 || !tokenEqual(got[0], sb.AccessToken) {
			return fmt.Errorf("%s does not match sandbox %s", headerAccessToken, sb.ID)
		}
		return nil
	}
	switch r.URL.Path {
	case "/health":
		return nil
	case "/files":
		if !r.URL.Query().Has("signature") {
			break
		}
		sf, err := parseSignedFiles(r.Method, r.URL.Query())
		if err != nil {
			return err
		}
		if !sf.signedBy(sb.AccessToken) {
			return fmt.Errorf("the URL's signature was not made for sandbox %s", sb.ID)
		}
		if sf.expired(time.Now()) {
			return errExpired(sf)
		}
		return nil
	}
	return fmt.Errorf("missing %s header: data-plane calls need the sandbox's envdAccessToken", headerAccessToken)
}

// authorizePort checks a request for a port other than the agent's. Like
// E2B, ports are public unless the sandbox's network policy sets
// allowPublicTraffic to false; then the request needs the sandbox's traffic
// access token (or its envd access token).
func (s *Server) authorizePort(r *http.Request, sb *engine.Sandbox) error {
	if publicTraffic(sb.Network) {
		return nil
	}
	if tok := r.Header.Get(headerTrafficToken); tok != "" && tokenEqual(tok, trafficToken(sb.AccessToken)) {
		return nil
	}
	if tok := r.Header.Get(headerAccessToken); tok != "" && tokenEqual(tok, sb.AccessToken) {
		return nil
	}
	return fmt.Errorf("sandbox %s does not allow public traffic: send its trafficAccessToken in %s", sb.ID, headerTrafficToken)
}

// serveSigned serves a signed /files URL without routing headers.
func (s *Server) serveSigned(w http.ResponseWriter, r *http.Request) {
	sf, err := parseSignedFiles(r.Method, r.URL.Query())
	if err != nil {
		writeDataError(w, r, statusOf(err), err.Error())
		return
	}
	id, err := s.signed.find(r.Context(), sf)
	if err != nil {
		writeDataError(w, r, statusOf(err), err.Error())
		return
	}
	if sf.expired(time.Now()) {
		writeDataError(w, r, http.StatusUnauthorized, errExpired(sf).Error())
		return
	}
	sb, err := s.lookup(r.Context(), id)
	if err == nil && s.foreignKey(r, sb) {
		s.sandboxGone(w, r, id, errUnknownSandbox(id))
		return
	}
	if err != nil {
		s.signed.remove(id)
		s.sandboxGone(w, r, id, err)
		return
	}
	s.forward(w, r, &proxyTarget{sandboxID: id, port: agentPort, agent: true})
}

func errExpired(sf *signedFiles) error {
	return fmt.Errorf("the URL's signature expired at %s", time.Unix(sf.Expiration, 0).UTC().Format(time.RFC3339))
}

func tokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// trafficToken derives a sandbox's traffic access token, which opens its
// exposed ports when public traffic is off, from its envd access token.
// Derived rather than stored, it cannot be turned back into the envd
// token, which grants far more.
func trafficToken(accessToken string) string {
	sum := sha256.Sum256([]byte("tupper traffic token v1\x00" + accessToken))
	return hex.EncodeToString(sum[:20])
}
