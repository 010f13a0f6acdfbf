package server

import (
	"net/http"
)

// handleGet serves GET /sandboxes/{id}: the sandbox's details, with its
// access token and network settings.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := s.engine.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.detailJSON(sb))
}
