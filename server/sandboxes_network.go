package server

import (
	"net/http"
)

// handleNetwork serves PUT /sandboxes/{id}/network: the body replaces the
// sandbox's egress settings (fields left out are cleared). The server
// records the policy and reports it in the sandbox's details; enforcing it
// belongs to the engine's network layer.
func (s *Server) handleNetwork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.engine.Get(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	ex, err := s.extras.get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	policy, internet, err := decodeNetwork(data, ex.Network)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ex.Network, ex.AllowInternetAccess = policy, internet
	if err := s.extras.put(r.Context(), id, ex); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("network settings recorded", "sandbox", id, "network", policy, "allowInternetAccess", internet)
	w.WriteHeader(http.StatusNoContent)
}
