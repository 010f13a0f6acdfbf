package server

import (
	"fmt"
	"net/http"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// handleConnect serves POST /sandboxes/{id}/connect and its /v2 twin: 200
// with the sandbox when it runs, 201 when it was paused and is resumed; a
// positive timeout also extends its life (that of a running one is never
// shortened).
func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	s.resumeOrConnect(w, r, false)
}

// handleResume serves the older POST /sandboxes/{id}/resume: 201 with the
// resumed sandbox, or 409 when it is not paused, as E2B does.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	s.resumeOrConnect(w, r, true)
}

func (s *Server) resumeOrConnect(w http.ResponseWriter, r *http.Request, pausedOnly bool) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	timeout, reboot, err := decodeConnect(data)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	before, err := s.engine.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wasPaused := before.State == store.StatePaused
	if pausedOnly && !wasPaused {
		s.writeError(w, r, fmt.Errorf("sandbox %s is %s, not paused: %w", id, before.State, errdefs.ErrFailedPrecondition))
		return
	}
	var sb *engine.Sandbox
	if wasPaused {
		sb, err = s.engine.ResumeWith(r.Context(), id, timeout, reboot)
	} else {
		sb, err = s.engine.Connect(r.Context(), id, timeout)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.signed.add(sb.ID, sb.AccessToken)
	status := http.StatusOK
	if wasPaused {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.sandboxJSON(sb))
}

// handlePause serves POST /sandboxes/{id}/pause, body {"memory": bool}
// (optional): 204 once the sandbox is saved to disk, 404 when unknown,
// 409 when not running (the JS SDK reads that as "already paused"), 501
// when its backend cannot checkpoint.
func (s *Server) handlePause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeJSON(data, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.engine.Pause(r.Context(), id, body.Memory == nil || *body.Memory); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
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
