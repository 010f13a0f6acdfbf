package server

import (
	"context"
	"net/http"
	"time"
)

// handleCreate serves POST /sandboxes and POST /v2/sandboxes: it boots a
// sandbox and answers 201 once its agent serves, since the SDKs use it at
// once.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	opts, err := decodeCreate(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.engine.Create(r.Context(), opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.Context().Err() != nil {
		// The client gave up while the sandbox booted: nobody knows its
		// id, so it would run its whole timeout for nothing.
		s.killQuietly(sb.ID, "its creator went away before the sandbox was ready")
		return
	}
	s.signed.add(sb.ID, sb.AccessToken)
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
}

// killQuietly kills a sandbox the server cannot hand out, on its own
// context: the request that made it may be gone.
func (s *Server) killQuietly(id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.engine.Kill(ctx, id); err != nil && !isNotFound(err) {
		s.log.Error("kill sandbox", "sandbox", id, "reason", reason, "err", err)
	}
}
