package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/proto"
	"github.com/lightbearco/tupper/template"
)

// Templates built through E2B's template API (package template): request
// a build, upload the files its COPY steps need, start it, follow its
// status and log; aliases, tags, listing and deletion.

// templateRoutes registers the template routes of the control plane.
func (s *Server) templateRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("POST", "/v3/templates", s.withBuilder(s.handleRequestBuild))
	handle("GET", "/templates", s.withBuilder(s.handleListTemplates))
	handle("GET", "/templates/{id}", s.withBuilder(s.handleGetTemplate))
	handle("GET", "/templates/{id}/files/{hash}", s.withBuilder(s.handleUploadLink))
	handle("POST", "/v2/templates/{id}/builds/{buildID}", s.withBuilder(s.handleStartBuild))
	handle("GET", "/templates/{id}/builds/{buildID}/status", s.withBuilder(s.handleBuildStatus))
	// GET /templates/aliases/{alias} and GET /templates/{id}/tags would
	// overlap as patterns ("/templates/aliases/tags"): one pattern serves
	// both.
	handle("GET", "/templates/{a}/{b}", s.withBuilder(s.handleTemplatePair))
	// POST and DELETE /templates/tags would overlap with DELETE
	// /templates/{id} the same way (handleDeleteTemplate serves it).
	handle("POST", "/templates/{id}", s.withBuilder(func(w http.ResponseWriter, r *http.Request, b *template.Builder) {
		if r.PathValue("id") != "tags" {
			writeStatus(w, http.StatusMethodNotAllowed, fmt.Sprintf("method POST is not allowed on %s", r.URL.Path))
			return
		}
		s.handleAssignTags(w, r, b)
	}))
}

// handleTemplatePair serves GET /templates/aliases/{alias} and GET
// /templates/{id}/tags.
func (s *Server) handleTemplatePair(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	switch first, second := r.PathValue("a"), r.PathValue("b"); {
	case first == "aliases":
		s.handleTemplateAlias(w, r, b, second)
	case second == "tags":
		s.handleTemplateTags(w, r, b, first)
	default:
		writeStatus(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	}
}

// uploadPrefix starts the paths of file uploads, which carry their own
// signature instead of an API key (the SDK PUTs to the URL it was given,
// with no headers of ours).
const uploadPrefix = "/template-uploads/"

// uploadLinkTTL is how long an upload URL stays good.
const uploadLinkTTL = time.Hour

// templates returns the builder, or an error when the server has none.
func (s *Server) templates() (*template.Builder, error) {
	if s.cfg.Templates == nil {
		return nil, fmt.Errorf("template builds are not enabled on this server: %w", errdefs.ErrNotSupported)
	}
	return s.cfg.Templates, nil
}

// withBuilder serves h with the server's builder, or answers 501 when it
// has none.
func (s *Server) withBuilder(h func(http.ResponseWriter, *http.Request, *template.Builder)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := s.templates()
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		h(w, r, b)
	}
}

// teamOf is the team of the request's API key.
func teamOf(r *http.Request) string {
	if sc, ok := engine.ScopeFrom(r.Context()); ok {
		return sc.Team
	}
	return ""
}

// decodeBody reads and decodes a JSON body into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(data, v)
}

func (s *Server) handleRequestBuild(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	var body struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount float64  `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	name := body.Name
	if name == "" {
		name = body.Alias
	}
	t, bd, err := b.RequestBuild(r.Context(), template.Request{Team: teamOf(r), Name: name, Tags: body.Tags, CPUs: body.CPUCount, MemoryMB: body.MemoryMB})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": t.ID, "buildID": bd.ID, "public": false,
		"aliases": t.Names, "names": t.Names, "tags": bd.Tags,
	})
}

func (s *Server) handleUploadLink(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	id, hash := r.PathValue("id"), strings.ToLower(r.PathValue("hash"))
	t, err := b.Get(teamOf(r), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	_, present, err := b.UploadPath(t.Team, hash)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := map[string]any{"present": present}
	if !present {
		// Made for the template's id, never for the name the client
		// used: ids are never used again, whereas a name deleted by one
		// team may be taken by another while the URL is still good, and
		// the files would then be that team's.
		expires := time.Now().Add(uploadLinkTTL).Unix()
		u := url.URL{Scheme: "http", Host: r.Host, Path: uploadPrefix + url.PathEscape(t.ID) + "/" + hash}
		if r.TLS != nil {
			u.Scheme = "https"
		}
		u.RawQuery = url.Values{"expires": {strconv.FormatInt(expires, 10)}, "signature": {s.uploadSignature(t.ID, hash, expires)}}.Encode()
		out["url"] = u.String()
	}
	writeJSON(w, http.StatusCreated, out)
}

// uploadSignature signs an upload of hash for template id until expires.
func (s *Server) uploadSignature(id, hash string, expires int64) string {
	m := hmac.New(sha256.New, s.uploadKey)
	fmt.Fprintf(m, "%s\x00%s\x00%d", id, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// newUploadKey makes the key that signs this server's upload URLs: a
// restart invalidates the URLs handed out before it, which the SDK asks
// for right before it uploads.
func newUploadKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// serveUpload serves PUT /template-uploads/{templateID}/{hash}?expires&signature:
// the archive of a COPY step's files.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		writeStatus(w, http.StatusMethodNotAllowed, "upload with PUT")
		return
	}
	b, err := s.templates()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, uploadPrefix)
	id, hash, ok := strings.Cut(rest, "/")
	q := r.URL.Query()
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	want := s.uploadSignature(id, hash, expires)
	if !ok || err != nil || !hmac.Equal([]byte(want), []byte(q.Get("signature"))) {
		writeStatus(w, http.StatusForbidden, "upload URL is not valid: ask for a new one (GET /templates/{id}/files/{hash})")
		return
	}
	if time.Now().Unix() > expires {
		writeStatus(w, http.StatusForbidden, "upload URL has expired: ask for a new one")
		return
	}
	// The files are the team's whose template the URL was made for, by
	// its id (a name is not enough, see handleUploadLink).
	t, err := b.Get("", id)
	if err == nil && t.ID != id {
		err = fmt.Errorf("template %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := b.PutUpload(t.Team, hash, r.Body); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleStartBuild(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	var spec template.Spec
	if err := decodeBody(w, r, &spec); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := b.StartBuild(r.Context(), teamOf(r), r.PathValue("id"), r.PathValue("buildID"), spec); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// logEntryJSON is a line of a build's log on the wire.
type logEntryJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

func (s *Server) handleBuildStatus(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		var err error
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			s.writeError(w, r, fmt.Errorf("logsOffset %q must be a whole number: %w", v, errdefs.ErrInvalidArgument))
			return
		}
	}
	bd, err := b.Status(teamOf(r), r.PathValue("id"), r.PathValue("buildID"), offset)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	entries := make([]logEntryJSON, 0, len(bd.Logs))
	lines := make([]string, 0, len(bd.Logs))
	for _, l := range bd.Logs {
		entries = append(entries, logEntryJSON(l))
		lines = append(lines, l.Timestamp.Format(time.RFC3339)+" "+l.Message)
	}
	out := map[string]any{
		"templateID": r.PathValue("id"), "buildID": bd.ID, "status": bd.Status,
		"logEntries": entries, "logs": lines,
	}
	if bd.Reason != nil {
		out["reason"] = map[string]any{"message": bd.Reason.Message, "step": bd.Reason.Step, "logEntries": []logEntryJSON{}}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleTemplateAlias(w http.ResponseWriter, r *http.Request, b *template.Builder, alias string) {
	t, err := b.Get("", alias)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if t.Team != teamOf(r) {
		writeStatus(w, http.StatusForbidden, fmt.Sprintf("template %s belongs to another team", alias))
		return
	}
	if !slices.ContainsFunc(t.Builds, func(bd *template.Build) bool { return bd.Status == template.StatusReady }) {
		// Asked for so that a build can be skipped: a template with no
		// build that succeeded is not there yet.
		writeStatus(w, http.StatusNotFound, fmt.Sprintf("template %s has no finished build", alias))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": t.ID, "public": false})
}

// templateJSON is a template in a listing, in E2B's fields.
func templateJSON(t *template.Template) map[string]any {
	var last *template.Build
	for _, bd := range t.Builds {
		if bd.Status == template.StatusReady {
			last = bd
		}
	}
	out := map[string]any{
		"templateID": t.ID, "public": false, "aliases": t.Names, "names": t.Names,
		"cpuCount": max(1, int(t.CPUs+0.5)), "memoryMB": t.MemoryMB, "diskSizeMB": 0,
		"createdAt": t.CreatedAt, "updatedAt": t.UpdatedAt, "createdBy": nil,
		"buildCount": len(t.Builds), "spawnCount": 0, "lastSpawnedAt": nil,
		"envdVersion": proto.EnvdVersion, "buildStatus": "waiting", "buildID": "",
	}
	if n := len(t.Builds); n > 0 {
		out["buildStatus"], out["buildID"] = t.Builds[n-1].Status, t.Builds[n-1].ID
	}
	if last != nil {
		out["buildID"] = last.ID
	}
	return out
}

func (s *Server) handleListTemplates(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	out := []map[string]any{}
	for _, t := range b.List(teamOf(r)) {
		out = append(out, templateJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGetTemplate(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	t, err := b.Get(teamOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := templateJSON(t)
	builds := []map[string]any{}
	for _, bd := range t.Builds {
		builds = append(builds, map[string]any{
			"buildID": bd.ID, "status": bd.Status, "createdAt": bd.CreatedAt, "finishedAt": bd.FinishedAt,
			"cpuCount": out["cpuCount"], "memoryMB": t.MemoryMB, "envdVersion": proto.EnvdVersion,
		})
	}
	out["builds"] = builds
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleAssignTags(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	var body struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	bd, err := b.AssignTags(r.Context(), teamOf(r), body.Target, body.Tags)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": bd.ID, "tags": body.Tags})
}

func (s *Server) handleRemoveTags(w http.ResponseWriter, r *http.Request, b *template.Builder) {
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := b.RemoveTags(r.Context(), teamOf(r), body.Name, body.Tags); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleTemplateTags(w http.ResponseWriter, r *http.Request, b *template.Builder, id string) {
	t, err := b.Get(teamOf(r), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := []map[string]any{}
	for tag, id := range t.Tags {
		created := t.CreatedAt
		for _, bd := range t.Builds {
			if bd.ID == id {
				created = bd.CreatedAt
			}
		}
		out = append(out, map[string]any{"tag": tag, "buildID": id, "createdAt": created})
	}
	slices.SortFunc(out, func(a, c map[string]any) int { return strings.Compare(a["tag"].(string), c["tag"].(string)) })
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate deletes the template ref names, for DELETE
// /templates/{id} when no snapshot has that name.
func (s *Server) deleteTemplate(r *http.Request, ref string) error {
	b, err := s.templates()
	if err != nil {
		return fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
	}
	return b.Delete(r.Context(), teamOf(r), ref)
}
