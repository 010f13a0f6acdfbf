package server

import (
	"fmt"
	"net/http"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// Secrets are write-only: a body carries a value in, and no answer, log
// line or error message carries one out. The errors of a malformed body
// here say only that it is malformed, since a JSON parser's message may
// quote what it choked on.

// secretJSON is a secret as the API reports it (E2B's Secret schema).
type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

func secretOf(info *engine.SecretInfo) secretJSON {
	md := info.Metadata
	if md == nil {
		md = map[string]string{}
	}
	const layout = "2006-01-02T15:04:05.000Z07:00"
	return secretJSON{
		SecretID: info.ID, Name: info.Name, CurrentVersion: info.Version, Metadata: md,
		CreatedAt: info.CreatedAt.UTC().Format(layout), UpdatedAt: info.UpdatedAt.UTC().Format(layout),
	}
}

// secretBody is the body of POST /secrets (name, value, metadata) and of
// POST /secrets/{id} (value, metadata; metadata absent or null keeps the
// secret's).
type secretBody struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// readSecretBody reads and decodes a secret's body without ever quoting
// it back.
func readSecretBody(w http.ResponseWriter, r *http.Request) (*secretBody, error) {
	data, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	var body secretBody
	if err := decodeJSON(data, &body); err != nil {
		return nil, fmt.Errorf(`request body must be a JSON object {"name": "…", "value": "…", "metadata": {…}} of strings: %w`, errdefs.ErrInvalidArgument)
	}
	return &body, nil
}

// handleCreateSecret serves POST /secrets: 201 with the secret, never its
// value; 409 when the team has a secret of that name.
func (s *Server) handleCreateSecret(w http.ResponseWriter, r *http.Request) {
	body, err := readSecretBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.engine.CreateSecret(r.Context(), body.Name, body.Value, body.Metadata)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, secretOf(info))
}

// handleUpdateSecret serves POST /secrets/{id} (an id or a name): 200 with
// the secret at its new version.
func (s *Server) handleUpdateSecret(w http.ResponseWriter, r *http.Request) {
	body, err := readSecretBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.engine.UpdateSecret(r.Context(), r.PathValue("id"), body.Value, body.Metadata)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretOf(info))
}

// handleGetSecret serves GET /secrets/{id} (an id or a name).
func (s *Server) handleGetSecret(w http.ResponseWriter, r *http.Request) {
	info, err := s.engine.GetSecret(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretOf(info))
}

// handleListSecrets serves GET /secrets?limit&nextToken: the team's
// secrets, oldest first, with X-Next-Token when there are more.
func (s *Server) handleListSecrets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, 100, 1000)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.engine.ListSecrets(r.Context(), limit, q.Get("nextToken"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]secretJSON, 0, len(list))
	for _, info := range list {
		out = append(out, secretOf(info))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteSecret serves DELETE /secrets/{id} (an id or a name): 204,
// or 404 for a secret the team does not have.
func (s *Server) handleDeleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.engine.DeleteSecret(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
