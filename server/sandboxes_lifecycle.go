package server

import (
	"fmt"
	"net/http"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// handleConnect serves POST /sandboxes/{id}/connect and its /v2 twin: 200
// with the sandbox when it runs; a positive timeout also extends its life
// (never shortens it). A paused sandbox would be resumed and answered with
// 201, once the engine can pause.
func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	timeout, err := decodeConnect(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.engine.Connect(r.Context(), id, timeout)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.signed.add(sb.ID, sb.AccessToken)
	writeJSON(w, http.StatusOK, s.sandboxJSON(sb))
}

// handleResume serves the older POST /sandboxes/{id}/resume. Nothing is
// ever paused yet, so a running sandbox answers 409 ("already running"),
// as E2B does.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := decodeConnect(data); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.engine.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeError(w, r, fmt.Errorf("sandbox %s is %s, not paused: %w", id, sb.State, errdefs.ErrFailedPrecondition))
}

// handlePause serves POST /sandboxes/{id}/pause. 404 when unknown, 409 when
// not running (the JS SDK reads that as "already paused"), and 501 for a
// running sandbox: no backend can pause through the engine yet.
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := s.engine.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if sb.State != store.StateRunning {
		s.writeError(w, r, fmt.Errorf("sandbox %s is %s, not running: %w", id, sb.State, errdefs.ErrFailedPrecondition))
		return
	}
	s.writeError(w, r, fmt.Errorf("pause is not supported by the %s backend yet: %w", sb.Backend, errdefs.ErrNotSupported))
}

// handleTimeout serves POST /sandboxes/{id}/timeout: the sandbox lives
// {timeout} seconds from now, longer or shorter than before.
func (s *Server) handleTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	timeout, err := decodeTimeout(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.engine.SetTimeout(r.Context(), id, timeout); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleKill serves DELETE /sandboxes/{id}: 204, or 404 when the sandbox
// is unknown or gone already (which the SDKs read as "already killed").
func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.engine.Kill(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.signed.remove(id)
	w.WriteHeader(http.StatusNoContent)
}
