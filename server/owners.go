package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// Sandboxes belong to teams. On the control plane and /mcp the engine
// enforces it, from the scope of the request's API key. The data plane
// needs no key, since a sandbox's own access token (or a URL signed with
// it) opens it, and only its team can learn that token; but a key the
// data plane is given anyway must not reach another team's sandbox, nor
// learn that it exists.

// foreignKey reports whether r carries a valid API key, in X-API-KEY or
// as a bearer token, of a team other than sb's. Such a request is answered
// as one for an unknown sandbox. Keys that do not verify are left to the
// token check, as requests without a key are.
func (s *Server) foreignKey(r *http.Request, sb *engine.Sandbox) bool {
	for _, key := range requestKeys(r) {
		k, err := s.keys.Verify(r.Context(), key)
		if err == nil && k.Team != sb.Team {
			return true
		}
	}
	return false
}

// requestKeys returns what r carries that is shaped like an API key, in
// X-API-KEY and in Authorization: Bearer.
func requestKeys(r *http.Request) []string {
	var keys []string
	for _, v := range r.Header.Values(headerAPIKey) {
		keys = append(keys, strings.TrimSpace(v))
	}
	for _, v := range r.Header.Values("Authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && strings.HasPrefix(strings.TrimSpace(tok), auth.KeyPrefix) {
			keys = append(keys, strings.TrimSpace(tok))
		}
	}
	return keys
}

// errUnknownSandbox is the error of a sandbox that is unknown, or that
// the caller may not know of.
func errUnknownSandbox(id string) error {
	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}
