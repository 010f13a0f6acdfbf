package server

import (
	"fmt"
	"math"
	"net/http"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// snapshotRoutes registers the routes of snapshots and forks.
func (s *Server) snapshotRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("POST", "/sandboxes/{id}/snapshots", s.handleCreateSnapshot)
	handle("GET", "/snapshots", s.handleListSnapshots)
	handle("POST", "/sandboxes/{id}/fork", s.handleFork)
	// The SDKs delete a snapshot as a template.
	handle("DELETE", "/templates/{id}", s.handleDeleteTemplate)
}

// snapshotJSON is a snapshot as the API reports it.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	// SandboxID, CreatedAt and SizeBytes are Tupper's extensions.
	SandboxID string `json:"sandboxID"`
	CreatedAt string `json:"createdAt"`
	SizeBytes int64  `json:"sizeBytes"`
}

func snapshotOf(sn *engine.Snapshot) snapshotJSON {
	names := sn.Names
	if names == nil {
		names = []string{}
	}
	return snapshotJSON{
		SnapshotID: sn.ID, Names: names, SandboxID: sn.Source.ID,
		CreatedAt: sn.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), SizeBytes: sn.SizeBytes,
	}
}

// handleCreateSnapshot serves POST /sandboxes/{id}/snapshots, body
// {"name": "…"} (optional): 201 with the snapshot, which
// Sandbox.create(snapshotID or name) starts from. The sandbox runs on.
func (s *Server) handleCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(data, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	sn, err := s.engine.CreateSnapshot(r.Context(), r.PathValue("id"), body.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(sn))
}

// handleListSnapshots serves GET /snapshots?sandboxID&name&limit&nextToken,
// oldest first, with X-Next-Token when there are more.
func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, 100, 1000)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.engine.ListSnapshots(r.Context(), q.Get("sandboxID"), q.Get("name"), limit, q.Get("nextToken"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]snapshotJSON, 0, len(list))
	for _, sn := range list {
		out = append(out, snapshotOf(sn))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteTemplate serves DELETE /templates/{id}: 204 when a snapshot
// or a template of that id (or name) went, 404 otherwise.
func (s *Server) handleDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("id")
	if ref == "tags" {
		s.withBuilder(s.handleRemoveTags)(w, r)
		return
	}
	err := s.engine.DeleteSnapshot(r.Context(), ref)
	if errdefs.IsNotFound(err) {
		err = s.deleteTemplate(r, ref)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forkResultJSON is one entry of a fork's answer: the sandbox, or the
// error that kept it from starting.
type forkResultJSON struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// handleFork serves POST /sandboxes/{id}/fork, body {"count": n,
// "timeout": seconds}: n sandboxes started from the sandbox as it is now,
// which runs on; 200 with one result per sandbox, each a sandbox or an
// error of its own.
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Count   *float64 `json:"count"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeJSON(data, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	count := 1
	if body.Count != nil {
		if *body.Count != math.Trunc(*body.Count) || *body.Count < 1 || *body.Count > 1000 {
			s.writeError(w, r, fmt.Errorf("count %v must be a whole number from 1: %w", *body.Count, errdefs.ErrInvalidArgument))
			return
		}
		count = int(*body.Count)
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	results, err := s.engine.Fork(r.Context(), r.PathValue("id"), count, timeout)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]forkResultJSON, len(results))
	for i, res := range results {
		if res.Err != nil {
			status := statusOf(res.Err)
			out[i].Error = &apiError{Code: status, Message: res.Err.Error()}
			continue
		}
		sb := s.sandboxJSON(res.Sandbox)
		s.signed.add(res.Sandbox.ID, res.Sandbox.AccessToken)
		out[i].Sandbox = &sb
	}
	writeJSON(w, http.StatusOK, out)
}
