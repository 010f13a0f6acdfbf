package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// A volume is a directory kept by Tupper, capped in size, that sandboxes
// mount read-write at create (CreateOptions.VolumeMounts), several at
// once, and that outlives them. Its files are read and written through
// the Volume without any sandbox, with the volume's own token.

// VolumeInfo describes a volume.
type VolumeInfo struct {
	ID   string
	Name string
	// SizeMB is the volume's size cap; CreatedAt when it was made.
	// Tupper's extensions: zero from servers that do not say.
	SizeMB    int64
	CreatedAt time.Time
	// Token opens the volume's files: anyone holding it reads and writes
	// them. Empty in listings.
	Token string
}

// VolumeMount mounts the volume named Name (or of that id) at Path in a
// sandbox; see CreateOptions.VolumeMounts.
type VolumeMount struct {
	Name string
	Path string
}

// VolumeEntry describes a file, directory or link of a volume.
type VolumeEntry struct {
	Name string
	// Path is the entry's path from the volume's top, "/".
	Path string
	// Type is "file", "directory", "symlink" or "unknown".
	Type string
	Size int64
	// Mode holds the permission bits.
	Mode                uint32
	UID, GID            uint32
	Atime, Mtime, Ctime time.Time
	// Target is a symbolic link's target.
	Target string
}

// VolumeTransport is a Transport that keeps volumes. Without it, the
// Client's volume methods fail with errdefs.ErrNotSupported.
type VolumeTransport interface {
	CreateVolume(ctx context.Context, name string, sizeMB int) (*VolumeInfo, error)
	ListVolumes(ctx context.Context) ([]VolumeInfo, error)
	// GetVolume returns the volume with its token.
	GetVolume(ctx context.Context, id string) (*VolumeInfo, error)
	DeleteVolume(ctx context.Context, id string) error
	// The volume content calls take the volume (its ID and Token).
	ListVolumeDir(ctx context.Context, v *VolumeInfo, path string, depth int) ([]VolumeEntry, error)
	MakeVolumeDir(ctx context.Context, v *VolumeInfo, path string, parents bool) (*VolumeEntry, error)
	StatVolumePath(ctx context.Context, v *VolumeInfo, path string) (*VolumeEntry, error)
	ReadVolumeFile(ctx context.Context, v *VolumeInfo, path string) (io.ReadCloser, error)
	WriteVolumeFile(ctx context.Context, v *VolumeInfo, path string, r io.Reader) (*VolumeEntry, error)
	RemoveVolumePath(ctx context.Context, v *VolumeInfo, path string) error
}

// Volume is a volume's files, reached through its Client's transport.
type Volume struct {
	VolumeInfo
	t VolumeTransport
}

func (c *Client) volumeTransport(op string) (VolumeTransport, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	vt, ok := t.(VolumeTransport)
	if !ok {
		return nil, fmt.Errorf("%s: this transport keeps no volumes: %w", op, errdefs.ErrNotSupported)
	}
	return vt, nil
}

// CreateVolume makes a volume named name (unique among the volumes of the
// API key's team) of sizeMB (0: the server's default, 1 GiB on Tupper).
func (c *Client) CreateVolume(ctx context.Context, name string, sizeMB int) (*Volume, error) {
	vt, err := c.volumeTransport(fmt.Sprintf("create volume %q", name))
	if err != nil {
		return nil, err
	}
	info, err := vt.CreateVolume(ctx, name, sizeMB)
	if err != nil {
		return nil, fmt.Errorf("create volume %q: %w", name, err)
	}
	return &Volume{VolumeInfo: *info, t: vt}, nil
}

// ConnectVolume returns volume id, ready to read and write.
func (c *Client) ConnectVolume(ctx context.Context, id string) (*Volume, error) {
	vt, err := c.volumeTransport(fmt.Sprintf("volume %q", id))
	if err != nil {
		return nil, err
	}
	info, err := vt.GetVolume(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", id, err)
	}
	return &Volume{VolumeInfo: *info, t: vt}, nil
}

// ListVolumes returns the volumes of the API key's team, without their
// tokens (ConnectVolume gets one).
func (c *Client) ListVolumes(ctx context.Context) ([]VolumeInfo, error) {
	vt, err := c.volumeTransport("list volumes")
	if err != nil {
		return nil, err
	}
	list, err := vt.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return list, nil
}

// DeleteVolume removes volume id and its files. A volume that a sandbox
// (running or paused) or a snapshot mounts is kept, with an error that
// names them.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	vt, err := c.volumeTransport(fmt.Sprintf("delete volume %q", id))
	if err != nil {
		return err
	}
	if err := vt.DeleteVolume(ctx, id); err != nil {
		return fmt.Errorf("delete volume %q: %w", id, err)
	}
	return nil
}

// List describes what the directory at path holds, depth levels down (0
// or 1: its own entries).
func (v *Volume) List(ctx context.Context, path string, depth int) ([]VolumeEntry, error) {
	return v.t.ListVolumeDir(ctx, &v.VolumeInfo, path, depth)
}

// MakeDir makes the directory at path; with parents, those above it too,
// and one that exists is no error.
func (v *Volume) MakeDir(ctx context.Context, path string, parents bool) (*VolumeEntry, error) {
	return v.t.MakeVolumeDir(ctx, &v.VolumeInfo, path, parents)
}

// Stat describes the entry at path (a link itself, not its target); a
// missing one is an error of class errdefs.ErrNotFound.
func (v *Volume) Stat(ctx context.Context, path string) (*VolumeEntry, error) {
	return v.t.StatVolumePath(ctx, &v.VolumeInfo, path)
}

// Open reads the file at path; the caller closes it.
func (v *Volume) Open(ctx context.Context, path string) (io.ReadCloser, error) {
	return v.t.ReadVolumeFile(ctx, &v.VolumeInfo, path)
}

// ReadFile returns the content of the file at path.
func (v *Volume) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, err := v.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// Write writes what r yields to the file at path, making the directories
// above it; the file is replaced once all is written. A volume too full
// for it fails with an error that IsDiskFull reports, and the file keeps
// its old content.
func (v *Volume) Write(ctx context.Context, path string, r io.Reader) (*VolumeEntry, error) {
	return v.t.WriteVolumeFile(ctx, &v.VolumeInfo, path, r)
}

// WriteFile writes data to the file at path (see Write).
func (v *Volume) WriteFile(ctx context.Context, path string, data []byte) (*VolumeEntry, error) {
	return v.Write(ctx, path, bytes.NewReader(data))
}

// Remove removes the entry at path, and all it holds.
func (v *Volume) Remove(ctx context.Context, path string) error {
	return v.t.RemoveVolumePath(ctx, &v.VolumeInfo, path)
}

// The wire of the volume routes (E2B's Volume, VolumeAndToken and
// VolumeEntryStat).

type volumeJSON struct {
	VolumeID  string    `json:"volumeID"`
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	SizeMB    int64     `json:"sizeMB"`
	CreatedAt time.Time `json:"createdAt"`
}

func (v *volumeJSON) info() *VolumeInfo {
	return &VolumeInfo{ID: v.VolumeID, Name: v.Name, Token: v.Token, SizeMB: v.SizeMB, CreatedAt: v.CreatedAt}
}

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
	Target string    `json:"target"`
}

func (e *volumeEntryJSON) entry() *VolumeEntry {
	return &VolumeEntry{
		Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target,
	}
}

var _ VolumeTransport = (*HTTPTransport)(nil)

// CreateVolume implements VolumeTransport: POST /volumes.
func (t *HTTPTransport) CreateVolume(ctx context.Context, name string, sizeMB int) (*VolumeInfo, error) {
	body := struct {
		Name   string `json:"name"`
		SizeMB int    `json:"sizeMB,omitempty"`
	}{name, sizeMB}
	var out volumeJSON
	if _, err := t.call(ctx, http.MethodPost, "/volumes", nil, body, &out); err != nil {
		return nil, err
	}
	return out.info(), nil
}

// ListVolumes implements VolumeTransport: GET /volumes.
func (t *HTTPTransport) ListVolumes(ctx context.Context) ([]VolumeInfo, error) {
	var out []volumeJSON
	if _, err := t.call(ctx, http.MethodGet, "/volumes", nil, nil, &out); err != nil {
		return nil, err
	}
	list := make([]VolumeInfo, 0, len(out))
	for i := range out {
		list = append(list, *out[i].info())
	}
	return list, nil
}

// GetVolume implements VolumeTransport: GET /volumes/{id}.
func (t *HTTPTransport) GetVolume(ctx context.Context, id string) (*VolumeInfo, error) {
	var out volumeJSON
	if _, err := t.call(ctx, http.MethodGet, "/volumes/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.info(), nil
}

// DeleteVolume implements VolumeTransport: DELETE /volumes/{id}.
func (t *HTTPTransport) DeleteVolume(ctx context.Context, id string) error {
	_, err := t.call(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// content makes one request of volume v's content routes, with its
// token and no API key, and returns the 2xx answer, whose body the caller
// closes.
func (t *HTTPTransport) content(ctx context.Context, v *VolumeInfo, method, route string, q url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := t.apiURL + "/volumecontent/" + url.PathEscape(v.ID) + route + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", v.ID, err)
	}
	req.Header.Set("Authorization", "Bearer "+v.Token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := t.dataClient.Do(req)
	if err != nil {
		return nil, fromTransport(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, fromResponse(resp)
	}
	return resp, nil
}

// contentJSON is content for answers of JSON, decoded into out.
func (t *HTTPTransport) contentJSON(ctx context.Context, v *VolumeInfo, method, route string, q url.Values, body io.Reader, contentType string, out any) error {
	resp, err := t.content(ctx, v, method, route, q, body, contentType)
	if err != nil {
		return err
	}
	defer drain(resp)
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBody)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected: %v: %w", method, route, err, errdefs.ErrUnavailable)
	}
	return nil
}

// ListVolumeDir implements VolumeTransport: GET /volumecontent/{id}/dir.
func (t *HTTPTransport) ListVolumeDir(ctx context.Context, v *VolumeInfo, path string, depth int) ([]VolumeEntry, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out []volumeEntryJSON
	if err := t.contentJSON(ctx, v, http.MethodGet, "/dir", q, nil, "", &out); err != nil {
		return nil, err
	}
	list := make([]VolumeEntry, 0, len(out))
	for i := range out {
		list = append(list, *out[i].entry())
	}
	return list, nil
}

// MakeVolumeDir implements VolumeTransport: POST /volumecontent/{id}/dir.
func (t *HTTPTransport) MakeVolumeDir(ctx context.Context, v *VolumeInfo, path string, parents bool) (*VolumeEntry, error) {
	var out volumeEntryJSON
	q := url.Values{"path": {path}, "force": {strconv.FormatBool(parents)}}
	if err := t.contentJSON(ctx, v, http.MethodPost, "/dir", q, nil, "", &out); err != nil {
		return nil, err
	}
	return out.entry(), nil
}

// StatVolumePath implements VolumeTransport: GET /volumecontent/{id}/path.
func (t *HTTPTransport) StatVolumePath(ctx context.Context, v *VolumeInfo, path string) (*VolumeEntry, error) {
	var out volumeEntryJSON
	if err := t.contentJSON(ctx, v, http.MethodGet, "/path", url.Values{"path": {path}}, nil, "", &out); err != nil {
		return nil, err
	}
	return out.entry(), nil
}

// ReadVolumeFile implements VolumeTransport: GET /volumecontent/{id}/file.
func (t *HTTPTransport) ReadVolumeFile(ctx context.Context, v *VolumeInfo, path string) (io.ReadCloser, error) {
	resp, err := t.content(ctx, v, http.MethodGet, "/file", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteVolumeFile implements VolumeTransport: PUT /volumecontent/{id}/file,
// the body streamed.
func (t *HTTPTransport) WriteVolumeFile(ctx context.Context, v *VolumeInfo, path string, r io.Reader) (*VolumeEntry, error) {
	var out volumeEntryJSON
	if err := t.contentJSON(ctx, v, http.MethodPut, "/file", url.Values{"path": {path}}, r, "application/octet-stream", &out); err != nil {
		return nil, err
	}
	return out.entry(), nil
}

// RemoveVolumePath implements VolumeTransport: DELETE /volumecontent/{id}/path.
func (t *HTTPTransport) RemoveVolumePath(ctx context.Context, v *VolumeInfo, path string) error {
	return t.contentJSON(ctx, v, http.MethodDelete, "/path", url.Values{"path": {path}}, nil, "", nil)
}
