package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/volume"
)

// volumeJSON is a volume as listings report it (E2B's Volume).
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	// SizeMB and CreatedAt are Tupper's extensions.
	SizeMB    int64     `json:"sizeMB"`
	CreatedAt time.Time `json:"createdAt"`
}

// volumeTokenJSON is a volume with the token of its content routes (E2B's
// VolumeAndToken). Domain stays out: the SDKs then send content requests
// to E2B_VOLUME_API_URL, which points at this server.
type volumeTokenJSON struct {
	volumeJSON
	Token string `json:"token"`
}

func volumeOf(v *engine.Volume) volumeJSON {
	return volumeJSON{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeBytes >> 20, CreatedAt: v.CreatedAt.UTC()}
}

// createVolumeBody is the body of POST /volumes.
type createVolumeBody struct {
	Name string `json:"name"`
	// SizeMB is Tupper's extension: the volume's size cap; 0 means the
	// daemon's default.
	SizeMB int `json:"sizeMB"`
}

// handleCreateVolume serves POST /volumes: 201 with the new volume and
// its token.
func (s *Server) handleCreateVolume(w http.ResponseWriter, r *http.Request) {
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var b createVolumeBody
	if err := decodeJSON(data, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	if b.SizeMB < 0 {
		s.writeError(w, r, fmt.Errorf("sizeMB %d is negative: %w", b.SizeMB, errdefs.ErrInvalidArgument))
		return
	}
	v, err := s.engine.CreateVolume(r.Context(), b.Name, b.SizeMB)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, volumeTokenJSON{volumeJSON: volumeOf(v), Token: v.Token})
}

// handleListVolumes serves GET /volumes: the team's volumes, oldest first,
// in one page (E2B's listing has none).
func (s *Server) handleListVolumes(w http.ResponseWriter, r *http.Request) {
	list, err := s.engine.ListVolumes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]volumeJSON, 0, len(list))
	for _, v := range list {
		out = append(out, volumeOf(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleGetVolume serves GET /volumes/{id}: the volume and its token
// (Volume.connect).
func (s *Server) handleGetVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.engine.GetVolume(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeTokenJSON{volumeJSON: volumeOf(v), Token: v.Token})
}

// handleDeleteVolume serves DELETE /volumes/{id}: 204, 404 when unknown,
// 409 naming the sandboxes and snapshots that still mount it.
func (s *Server) handleDeleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.engine.DeleteVolume(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// contentHandler serves a volume content route on the volume the
// request's token opened.
type contentHandler func(w http.ResponseWriter, r *http.Request, fs *volume.FS)

// volumeContent opens the volume of the request's path with the bearer
// token it carries, and hands it to h.
func (s *Server) volumeContent(h contentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			writeContentStatus(w, http.StatusUnauthorized, "missing Authorization: Bearer <token>: pass the volume's token (Volume.create and Volume.connect give it)")
			return
		}
		fs, _, err := s.engine.OpenVolume(r.Context(), r.PathValue("id"), strings.TrimSpace(token))
		if err != nil {
			s.writeContentError(w, r, err)
			return
		}
		defer fs.Close()
		h(w, r, fs)
	}
}

// volumeEntryJSON is an entry of a volume (E2B's VolumeEntryStat).
type volumeEntryJSON struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

func entryOf(e *volume.Entry) volumeEntryJSON {
	return volumeEntryJSON{
		Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime.UTC(), Mtime: e.Mtime.UTC(), Ctime: e.Ctime.UTC(), Target: e.Target,
	}
}

// contentPath is the path query parameter of a content request, which
// every route needs.
func contentPath(q url.Values) (string, error) {
	if !q.Has("path") {
		return "", fmt.Errorf("query parameter path is required: %w", errdefs.ErrInvalidArgument)
	}
	return q.Get("path"), nil
}

// queryAttrs reads the uid, gid and mode query parameters of a make dir
// or a write, as decimal numbers.
func queryAttrs(q url.Values) (volume.Attrs, error) {
	var a volume.Attrs
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"uid", &a.UID}, {"gid", &a.GID}, {"mode", &a.Mode}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return a, fmt.Errorf("%s %q must be a whole number: %w", f.name, s, errdefs.ErrInvalidArgument)
		}
		v := uint32(n)
		*f.dst = &v
	}
	return a, a.Validate()
}

// queryBool reads a boolean query parameter; absent is false.
func queryBool(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s %q must be true or false: %w", name, s, errdefs.ErrInvalidArgument)
	}
	return v, nil
}

// handleVolumeList serves GET /volumecontent/{id}/dir?path&depth.
func (s *Server) handleVolumeList(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	q := r.URL.Query()
	p, err := contentPath(q)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	depth := 1
	if v := q.Get("depth"); v != "" {
		if depth, err = strconv.Atoi(v); err != nil || depth < 1 {
			s.writeContentError(w, r, fmt.Errorf("depth %q must be a whole number from 1 to %d: %w", v, volume.MaxListDepth, errdefs.ErrInvalidArgument))
			return
		}
	}
	list, err := fs.List(p, depth)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	out := make([]volumeEntryJSON, 0, len(list))
	for i := range list {
		out = append(out, entryOf(&list[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleVolumeMakeDir serves POST /volumecontent/{id}/dir?path&uid&gid&mode&force:
// force makes the missing parents too, and takes an existing directory.
func (s *Server) handleVolumeMakeDir(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	q := r.URL.Query()
	p, err := contentPath(q)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	attrs, err := queryAttrs(q)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	force, err := queryBool(q, "force")
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	e, err := fs.MakeDir(p, attrs, force)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryOf(e))
}

// handleVolumeStat serves GET /volumecontent/{id}/path?path.
func (s *Server) handleVolumeStat(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	p, err := contentPath(r.URL.Query())
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	e, err := fs.Stat(p)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryOf(e))
}

// metadataBody is the body of PATCH /volumecontent/{id}/path.
type metadataBody struct {
	UID  *uint32 `json:"uid"`
	GID  *uint32 `json:"gid"`
	Mode *uint32 `json:"mode"`
}

// handleVolumeUpdate serves PATCH /volumecontent/{id}/path?path with
// {uid, gid, mode}, each optional.
func (s *Server) handleVolumeUpdate(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	p, err := contentPath(r.URL.Query())
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	data, err := readBody(w, r)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	var b metadataBody
	if err := decodeJSON(data, &b); err != nil {
		s.writeContentError(w, r, err)
		return
	}
	e, err := fs.SetAttrs(p, volume.Attrs{UID: b.UID, GID: b.GID, Mode: b.Mode})
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryOf(e))
}

// handleVolumeRemove serves DELETE /volumecontent/{id}/path?path: the
// entry, and what it holds.
func (s *Server) handleVolumeRemove(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	p, err := contentPath(r.URL.Query())
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	if err := fs.Remove(p); err != nil {
		s.writeContentError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleVolumeRead serves GET /volumecontent/{id}/file?path: the file's
// bytes, never compressed (identity is what fetch reads fastest), with
// ranges.
func (s *Server) handleVolumeRead(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	p, err := contentPath(r.URL.Query())
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	f, e, err := fs.Read(p)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, path.Base(e.Path), e.Mtime, f)
}

// maxFullDrain is the most of an upload's body read and dropped after the
// volume turned out full: enough that a client still sending gets the
// answer rather than a reset connection, not so much that a client can
// keep the server reading for ever.
const maxFullDrain = 256 << 20

// handleVolumeWrite serves PUT /volumecontent/{id}/file?path&uid&gid&mode&force
// with the file's bytes as the body, streamed to the volume: an upload
// that does not fit answers 507 and leaves the file as it was. The file
// is replaced whole whatever force says (as the SDKs' writeFile promises).
func (s *Server) handleVolumeWrite(w http.ResponseWriter, r *http.Request, fs *volume.FS) {
	q := r.URL.Query()
	p, err := contentPath(q)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	attrs, err := queryAttrs(q)
	if err != nil {
		s.writeContentError(w, r, err)
		return
	}
	if _, err := queryBool(q, "force"); err != nil {
		s.writeContentError(w, r, err)
		return
	}
	if r.ContentLength > 0 {
		// A body that cannot fit is refused before it is written.
		if u, err := fs.Usage(); err == nil && r.ContentLength > u.Free {
			io.CopyN(io.Discard, r.Body, maxFullDrain)
			s.writeContentError(w, r, fmt.Errorf("write %s: %d bytes do not fit in the %d free of %d: %w", p, r.ContentLength, u.Free, u.Size, volume.ErrFull))
			return
		}
	}
	e, err := fs.Write(p, r.Body, attrs)
	if err != nil {
		if volume.IsFull(err) {
			io.CopyN(io.Discard, r.Body, maxFullDrain)
		}
		s.writeContentError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryOf(e))
}

// contentError is the error body of the content routes (E2B's volume
// content Error: its code is a string).
type contentError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeContentError answers a content request with err. Its status is
// statusOf's but for a full volume: 507, as envd's /files answers for a
// full disk, where statusOf's 429 would have the SDKs retry what cannot
// succeed.
func (s *Server) writeContentError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if volume.IsFull(err) {
		status = http.StatusInsufficientStorage
	}
	if status == http.StatusInternalServerError {
		s.log.Error("volume content request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeContentStatus(w, status, err.Error())
}

func writeContentStatus(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(contentError{Code: strconv.Itoa(status), Message: msg})
}
