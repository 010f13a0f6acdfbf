package server

import (
	"net/http"

	"github.com/lightbearco/tupper/netpolicy"
)

// handleNetwork serves PUT /sandboxes/{id}/network: the body replaces the
// sandbox's egress settings (fields left out are cleared) and takes effect
// at once; open connections the new policy denies are cut.
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
	policy, internet, err := decodeNetwork(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.engine.UpdateNetwork(r.Context(), id, policy, internet); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// networkLogJSON is the answer of GET /sandboxes/{id}/network/denials,
// Tupper's own route: what the sandbox's policy refused lately.
type networkLogJSON struct {
	SandboxID string             `json:"sandboxID"`
	Denials   []netpolicy.Denial `json:"denials"`
}

// handleNetworkDenials serves GET /sandboxes/{id}/network/denials.
func (s *Server) handleNetworkDenials(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	list, err := s.engine.NetworkDenials(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []netpolicy.Denial{}
	}
	writeJSON(w, http.StatusOK, networkLogJSON{SandboxID: id, Denials: list})
}
