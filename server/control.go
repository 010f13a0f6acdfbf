package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// controlPlane returns the handler of the E2B REST API. Every route needs
// an API key. Unknown paths and methods answer JSON errors, never Go's
// plain-text defaults, since the SDKs parse error bodies.
func (s *Server) controlPlane() http.Handler {
	mux := http.NewServeMux()
	paths := map[string][]string{}
	handle := func(method, path string, h http.HandlerFunc) {
		mux.HandleFunc(method+" "+path, h)
		paths[path] = append(paths[path], method)
	}

	handle("POST", "/sandboxes", s.handleCreate)
	handle("POST", "/v2/sandboxes", s.handleCreate)
	handle("GET", "/sandboxes", s.handleListV1)
	handle("GET", "/v2/sandboxes", s.handleList)
	handle("GET", "/sandboxes/{id}", s.handleGet)
	handle("DELETE", "/sandboxes/{id}", s.handleKill)
	handle("POST", "/sandboxes/{id}/connect", s.handleConnect)
	handle("POST", "/v2/sandboxes/{id}/connect", s.handleConnect)
	handle("POST", "/sandboxes/{id}/resume", s.handleResume)
	handle("POST", "/sandboxes/{id}/pause", s.handlePause)
	handle("POST", "/sandboxes/{id}/timeout", s.handleTimeout)
	handle("GET", "/sandboxes/{id}/metrics", s.handleMetrics)
	// Not through handle: its method-less pattern for other methods would
	// conflict with /sandboxes/{id}'s.
	mux.HandleFunc("GET /sandboxes/metrics", s.handleLatestMetrics)
	handle("PUT", "/sandboxes/{id}/network", s.handleNetwork)
	handle("GET", "/sandboxes/{id}/network/denials", s.handleNetworkDenials)
	handle("GET", "/images", s.handleListImages)
	s.snapshotRoutes(handle)
	s.volumeRoutes(handle)
	s.secretRoutes(handle)
	s.templateRoutes(handle)
	s.observeRoutes(handle)
	s.dashboardRoutes(handle)

	// A pattern without a method is less specific than one with, so these
	// catch only the methods not registered above.
	for path, methods := range paths {
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeStatus(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s.withVolumeContent(s.requireAPIKey(mux))
}

// requireAPIKey lets through requests with a valid X-API-KEY, scoped to
// the key's team: every engine call of the request then sees and touches
// only that team's sandboxes, and any other answers 404, as an unknown id
// does. On the local socket, a request without a key is its peer's (see
// serveSocketPeer). The key of a dashboard session (logins.go) acts in the
// scope of whoever asked for its sign-in link.
func (s *Server) requireAPIKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(headerAPIKey)
		if key == "" {
			if p, ok := socketPeerFrom(r.Context()); ok {
				s.serveSocketPeer(w, r, p, next)
				return
			}
			writeStatus(w, http.StatusUnauthorized, "missing X-API-KEY header: pass one of the keys of `tupper keys`")
			return
		}
		if r, ok := s.sessionContext(r, key); ok {
			next.ServeHTTP(w, r)
			return
		}
		k, err := s.keys.Verify(r.Context(), key)
		if err != nil {
			if errdefs.IsNotFound(err) || statusOf(err) == http.StatusUnauthorized {
				writeStatus(w, http.StatusUnauthorized, "invalid API key")
				return
			}
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(engine.WithScope(r.Context(), engine.Scope{Team: k.Team, Key: k.ID})))
	})
}
