package server

import (
	"cmp"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/server/dashboard"
)

// The web dashboard (package dashboard) and how one signs in to it without
// a key: see logins.go.

// isDashboardPath reports whether path is the dashboard's.
func isDashboardPath(path string) bool {
	return path == strings.TrimSuffix(dashboard.Prefix, "/") || strings.HasPrefix(path, dashboard.Prefix)
}

// dashboardHandler serves the paths under /dashboard: the page's files and
// the trade of a sign-in link for a session, both open to anyone (the
// files hold no secret; the trade needs the link's token), and the rest
// through the control plane, behind its API key.
func (s *Server) dashboardHandler() http.Handler {
	mux := http.NewServeMux()
	files := dashboard.Handler(dashboard.Embedded())
	mux.Handle("GET "+dashboard.Prefix, files)
	mux.Handle("GET "+strings.TrimSuffix(dashboard.Prefix, "/"), files)
	mux.HandleFunc("POST "+dashboard.Prefix+"session", s.handleSessionStart)
	mux.HandleFunc("DELETE "+dashboard.Prefix+"session", s.handleSessionEnd)
	// A control-plane route beneath the files' GET.
	mux.Handle("GET "+dashboard.Prefix+"whoami", s.control)
	mux.Handle("/", s.control)
	return mux
}

// dashboardRoutes registers the control-plane routes of the dashboard.
func (s *Server) dashboardRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("POST", dashboard.Prefix+"links", s.handleDashboardLink)
	handle("GET", dashboard.Prefix+"whoami", s.handleWhoami)
}

// whoamiJSON answers GET /dashboard/whoami.
type whoamiJSON struct {
	// Team is the team the caller's credential acts for.
	Team string `json:"team"`
	// Session says the credential is a dashboard session's key.
	Session bool `json:"session"`
}

// handleWhoami serves GET /dashboard/whoami: which team the caller acts
// for, so that the page can say so and ask before a sign-in link switches
// a tab to another team.
func (s *Server) handleWhoami(w http.ResponseWriter, r *http.Request) {
	_, session := s.logins.session(r.Header.Get(headerAPIKey))
	writeJSON(w, http.StatusOK, whoamiJSON{Team: cmp.Or(teamOf(r), engine.DefaultTeam), Session: session})
}

// dashboardLinkJSON answers POST /dashboard/links.
type dashboardLinkJSON struct {
	// URL opens the dashboard signed in, once. Its token sits in the
	// fragment, which browsers send to no server.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// handleDashboardLink serves POST /dashboard/links: a one-time sign-in
// link to the dashboard, for the scope of the caller's credential. A
// dashboard session may not make one: its end would not end the sessions
// its links open.
func (s *Server) handleDashboardLink(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.logins.session(r.Header.Get(headerAPIKey)); ok {
		s.writeError(w, r, fmt.Errorf("a dashboard session cannot make sign-in links: use an API key: %w", errdefs.ErrPermissionDenied))
		return
	}
	sc, scoped := engine.ScopeFrom(r.Context())
	token, expires, err := s.logins.newLink(grant{scope: sc, scoped: scoped})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, dashboardLinkJSON{
		URL: s.baseURL(r) + dashboard.Prefix + "#login=" + token, ExpiresAt: expires.UTC(),
	})
}

// baseURL is where the caller reaches this server: the address it asked
// for over TCP, else (over the local socket, whose requests name no
// address a browser could open) Config.URL.
func (s *Server) baseURL(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "tcp" && r.Host != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		return scheme + "://" + r.Host
	}
	return strings.TrimSuffix(s.cfg.URL, "/")
}

// sessionJSON answers POST /dashboard/session.
type sessionJSON struct {
	// Key opens the control plane like an API key until ExpiresAt, or
	// until DELETE /dashboard/session ends it.
	Key       string    `json:"key"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Team is the team the session acts for.
	Team string `json:"team"`
}

// handleSessionStart serves POST /dashboard/session, {"token": …}: the
// link's token, used up, for a session key. The body must be JSON, which
// a page of another site cannot send without the browser asking first,
// and which this server never allows.
func (s *Server) handleSessionStart(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeStatus(w, http.StatusUnsupportedMediaType, "the body must be JSON: {\"token\": …}")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	key, expires, err := s.logins.redeem(body.Token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	team := engine.DefaultTeam
	if g, ok := s.logins.session(key); ok {
		team = cmp.Or(g.team(), engine.DefaultTeam)
	}
	writeJSON(w, http.StatusCreated, sessionJSON{Key: key, ExpiresAt: expires.UTC(), Team: team})
}

// handleSessionEnd serves DELETE /dashboard/session: the session whose
// key is X-API-KEY ends. Anything else (an API key, no key) is left be:
// the answer is 204 all the same.
func (s *Server) handleSessionEnd(w http.ResponseWriter, r *http.Request) {
	s.logins.end(r.Header.Get(headerAPIKey))
	w.WriteHeader(http.StatusNoContent)
}

// sessionContext returns r's context in the scope of session key, and
// false when key opens no session. A session made with an API key ends
// when that key is removed; one whose key cannot be looked up opens
// nothing this time.
func (s *Server) sessionContext(r *http.Request, key string) (*http.Request, bool) {
	g, ok := s.logins.session(key)
	if !ok {
		return r, false
	}
	if g.scoped && g.scope.Key != "" {
		has, err := s.keys.Has(r.Context(), g.scope.Key)
		if err != nil {
			s.log.Error("look up a dashboard session's key", "key", g.scope.Key, "err", err)
			return r, false
		}
		if !has {
			s.logins.end(key)
			return r, false
		}
	}
	if g.scoped {
		return r.WithContext(engine.WithScope(r.Context(), g.scope)), true
	}
	return r, true
}
