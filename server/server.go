// Package server is the HTTP side of `tupper serve`: on one port, the E2B
// control plane (create, list, kill… sandboxes; shared/specs/e2b-wire.md §2)
// and the data plane, a reverse proxy to the agent inside each sandbox
// (§1, §3, §4), so that the published E2B SDKs work against Tupper
// unchanged.
//
// Requests are routed, in this order, by
//   - a Host of the form <port>-<sandboxID>.<domain>: proxied to that port
//     of the sandbox (the SDKs' getHost);
//   - an E2b-Sandbox-Id header: proxied to the sandbox's agent, or to the
//     port named by E2b-Sandbox-Port;
//   - a signed /files URL: proxied to the sandbox whose token signed it;
//   - /dashboard/…: the web dashboard (package dashboard), whose page
//     then calls both planes as any client does;
//   - anything else: the control plane, which needs an API key (X-API-KEY).
//
// The data plane never accepts an API key: the agent's port needs the
// sandbox's own access token, so one sandbox's token opens no other.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/template"
)

// Config configures a Server.
type Config struct {
	// Engine runs the sandboxes. Required.
	Engine *engine.Engine
	// Keys holds the API keys that open the control plane. Required.
	Keys *auth.Store
	// Domain is what create answers as the sandbox's domain, from which
	// the SDKs render getHost(port) as "<port>-<sandboxID>.<domain>". Set
	// it to a name that resolves to this server, with the port when it
	// is not 80 or 443 (for example "localhost:3000"). Empty means
	// "localhost".
	Domain string
	// DialTimeout bounds connecting to a sandbox; zero means 5 seconds.
	DialTimeout time.Duration
	// Templates, when set, builds templates through E2B's template API
	// (the routes answer 501 without it).
	Templates *template.Builder
	// MetricsPeriod is how often each running sandbox's resource use is
	// sampled for GET /sandboxes/{id}/metrics; zero means
	// DefaultMetricsPeriod. The last hour of samples is kept.
	MetricsPeriod time.Duration
	// MCP, when set, serves /mcp (package mcp's Handler, which checks API
	// keys itself).
	MCP http.Handler
	// URL is where users reach the server, "http://127.0.0.1:3000": the
	// links it hands out to callers on a unix socket (the dashboard's
	// sign-in links) start with it. Callers over TCP get links to the
	// address they asked for.
	URL string
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Engine == nil:
		return fmt.Errorf("server: Engine is required: %w", errdefs.ErrInvalidArgument)
	case c.Keys == nil:
		return fmt.Errorf("server: Keys is required: %w", errdefs.ErrInvalidArgument)
	}
	if c.Domain == "" {
		c.Domain = "localhost"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	switch {
	case c.MetricsPeriod < 0:
		return fmt.Errorf("server: MetricsPeriod %v is negative: %w", c.MetricsPeriod, errdefs.ErrInvalidArgument)
	case c.MetricsPeriod == 0:
		c.MetricsPeriod = DefaultMetricsPeriod
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Server serves the control plane and the data plane. It is an
// http.Handler, safe for concurrent use. It owns neither the Engine nor the
// key Store: closing them is the caller's business, after Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	engine  *engine.Engine
	keys    *auth.Store
	signed  *tokenIndex
	control http.Handler
	// handler is the whole server: the routing of ServeHTTP, logged.
	handler http.Handler
	// agents carries the data plane's requests to sandboxes.
	agents *http.Transport
	proxy  *httputil.ReverseProxy
	// metrics asks agents for /metrics on the control plane's behalf.
	metrics *http.Client
	// sampler keeps the running sandboxes' metrics over time.
	sampler *sampler
	// uploadKey signs the URLs of template file uploads.
	uploadKey []byte
	// logins holds the dashboard's sign-in links and sessions;
	// dashboard serves its paths.
	logins    *logins
	dashboard http.Handler
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.With("component", "server"),
		engine: cfg.Engine, keys: cfg.Keys,
		signed: newTokenIndex(cfg.Engine), uploadKey: newUploadKey(), logins: newLogins(),
	}
	s.agents = newAgentTransport(cfg.Engine, cfg.DialTimeout)
	s.proxy = s.newProxy()
	s.metrics = &http.Client{Transport: s.agents, Timeout: 10 * time.Second}
	s.control = s.controlPlane()
	s.dashboard = s.dashboardHandler()
	s.handler = s.logged(http.HandlerFunc(s.route))
	s.sampler = newSampler(s, cfg.MetricsPeriod)
	s.sampler.start()
	return s, nil
}

// Close stops sampling metrics and releases the server's own resources.
// It does not close the Engine or the key Store.
func (s *Server) Close() error {
	s.sampler.close()
	s.agents.CloseIdleConnections()
	return nil
}

// ServeHTTP routes a request to the data plane or the control plane (see
// the package documentation).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if _, ok := socketPeerFrom(r.Context()); ok && s.cfg.URL != "" {
		// Where URLs the client hands to others must point.
		w.Header().Set(localsock.HeaderPublicURL, s.cfg.URL)
	}
	if t, ok := parseSandboxHost(r.Host); ok {
		s.serveHostRouted(w, r, t)
		return
	}
	if id := r.Header.Get(headerSandboxID); id != "" {
		s.serveHeaderRouted(w, r, id)
		return
	}
	if r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		s.serveSigned(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, uploadPrefix) {
		s.serveUpload(w, r)
		return
	}
	// After the sandbox routes, so that a sandbox's own /mcp stays
	// reachable through its host name or header.
	if s.cfg.MCP != nil && r.URL.Path == "/mcp" {
		s.cfg.MCP.ServeHTTP(w, r)
		return
	}
	if isDashboardPath(r.URL.Path) {
		s.dashboard.ServeHTTP(w, r)
		return
	}
	s.control.ServeHTTP(w, r)
}

// lookup returns a sandbox that the engine runs. A sandbox that is
// unknown, killed or still being created is errdefs.ErrNotFound.
func (s *Server) lookup(ctx context.Context, id string) (*engine.Sandbox, error) {
	sb, err := s.engine.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// isNotFound reports whether err means the sandbox does not exist (any
// more).
func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }
