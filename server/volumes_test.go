package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/volume"
)

// volumeEnv is a test env whose volumes are removed (unmounted) when the
// test ends, before its directories are.
func volumeEnv(t *testing.T) *testEnv {
	t.Helper()
	testutil.RequiresRoot(t)
	e := newTestEnv(t)
	t.Cleanup(func() {
		ctx := context.Background()
		e.engine.KillAll(ctx)
		vols, _ := e.engine.ListVolumes(ctx)
		for _, v := range vols {
			if err := e.engine.DeleteVolume(ctx, v.ID); err != nil {
				t.Errorf("delete volume %s: %v", v.ID, err)
			}
		}
	})
	return e
}

// createVolume makes a volume through the API.
func (e *testEnv) createVolume(key, body string) volumeTokenJSON {
	e.t.Helper()
	status, _, raw := e.doKey(key, "POST", "/volumes", body)
	if status != http.StatusCreated {
		e.t.Fatalf("POST /volumes %s: %d %s", body, status, raw)
	}
	var v volumeTokenJSON
	if err := json.Unmarshal(raw, &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// content sends a volume content request with token.
func (e *testEnv) content(token, method, route string, q url.Values, body io.Reader, header http.Header) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+route+"?"+q.Encode(), body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func pathQuery(p string, kv ...string) url.Values {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func TestVolumeRoutes(t *testing.T) {
	e := volumeEnv(t)
	ctx := context.Background()
	v := e.createVolume(e.key, `{"name":"data","sizeMB":32}`)
	if v.Name != "data" || len(v.VolumeID) == 0 || len(v.Token) < 32 || v.SizeMB != 32 {
		t.Errorf("create answered %+v", v)
	}
	if status, _, body := e.do("POST", "/volumes", `{"name":"data"}`); status != http.StatusConflict {
		t.Errorf("a second volume named data: %d %s, want 409", status, body)
	}
	for _, body := range []string{`{"name":"../etc"}`, `{"name":"a/b"}`, `{"name":""}`, `{"name":"x","sizeMB":-1}`, `{"name":"x","sizeMB":1}`} {
		if status, _, raw := e.do("POST", "/volumes", body); status != http.StatusBadRequest {
			t.Errorf("POST /volumes %s: %d %s, want 400", body, status, raw)
		}
	}
	status, _, raw := e.do("GET", "/volumes/"+v.VolumeID, "")
	var got volumeTokenJSON
	if json.Unmarshal(raw, &got); status != http.StatusOK || got.Token != v.Token || got.Name != "data" {
		t.Errorf("GET /volumes/{id}: %d %s", status, raw)
	}
	status, _, raw = e.do("GET", "/volumes", "")
	var list []map[string]any
	if json.Unmarshal(raw, &list); status != http.StatusOK || len(list) != 1 || list[0]["volumeID"] != v.VolumeID || list[0]["token"] != nil {
		t.Errorf("GET /volumes: %d %s, want the volume without its token", status, raw)
	}

	// Another team's key sees nothing of it, and cannot mount it.
	blueKey, _, err := e.server.keys.CreateInTeam(ctx, "blue", "blue")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, raw := e.doKey(blueKey, "GET", "/volumes/"+v.VolumeID, ""); status != http.StatusNotFound {
		t.Errorf("blue gets red's volume: %d %s", status, raw)
	}
	if status, _, raw := e.doKey(blueKey, "DELETE", "/volumes/"+v.VolumeID, ""); status != http.StatusNotFound {
		t.Errorf("blue deletes red's volume: %d %s", status, raw)
	}
	if _, _, raw := e.doKey(blueKey, "GET", "/volumes", ""); strings.TrimSpace(string(raw)) != "[]" {
		t.Errorf("blue's listing: %s", raw)
	}
	for _, name := range []string{"data", v.VolumeID} {
		body := `{"templateID":"base","volumeMounts":[{"name":"` + name + `","path":"/data"}]}`
		if status, _, raw := e.doKey(blueKey, "POST", "/v2/sandboxes", body); status != http.StatusNotFound {
			t.Errorf("blue mounts red's volume %s: %d %s, want 404", name, status, raw)
		}
	}
	// Nor does the API key open the content: only the volume's token.
	if status, raw := e.content("", "GET", "/volumecontent/"+v.VolumeID+"/dir", pathQuery("/"), nil, http.Header{"X-Api-Key": {e.key}}); status != http.StatusUnauthorized {
		t.Errorf("content with the API key: %d %s", status, raw)
	}
	if status, raw := e.content(e.key, "GET", "/volumecontent/"+v.VolumeID+"/dir", pathQuery("/"), nil, nil); status != http.StatusUnauthorized {
		t.Errorf("content with the API key as the bearer: %d %s", status, raw)
	}
	other := e.createVolume(blueKey, `{"name":"blue","sizeMB":32}`)
	if status, raw := e.content(other.Token, "GET", "/volumecontent/"+v.VolumeID+"/dir", pathQuery("/"), nil, nil); status != http.StatusUnauthorized {
		t.Errorf("content with another volume's token: %d %s", status, raw)
	}

	// A sandbox mounts it; then it cannot be deleted.
	status, _, raw = e.do("POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"data","path":"/home/user/data"}]}`)
	if status != http.StatusCreated {
		t.Fatalf("create with a volume: %d %s", status, raw)
	}
	var sb sandboxJSON
	json.Unmarshal(raw, &sb)
	for _, body := range []string{
		`{"volumeMounts":[{"name":"nope","path":"/data"}]}`,
	} {
		if status, _, raw := e.do("POST", "/v2/sandboxes", body); status != http.StatusNotFound || !strings.Contains(string(raw), "nope") {
			t.Errorf("create %s: %d %s, want 404 naming the volume", body, status, raw)
		}
	}
	for _, body := range []string{
		`{"volumeMounts":[{"name":"data","path":"/proc/x"}]}`,
		`{"volumeMounts":[{"name":"data","path":"relative"}]}`,
		`{"volumeMounts":[{"name":"data","path":"/.tupper"}]}`,
	} {
		if status, _, raw := e.do("POST", "/v2/sandboxes", body); status != http.StatusBadRequest {
			t.Errorf("create %s: %d %s, want 400", body, status, raw)
		}
	}
	status, _, raw = e.do("DELETE", "/volumes/"+v.VolumeID, "")
	if status != http.StatusConflict || !strings.Contains(string(raw), sb.SandboxID) {
		t.Errorf("delete of a mounted volume: %d %s, want 409 naming %s", status, raw, sb.SandboxID)
	}
	e.do("DELETE", "/sandboxes/"+sb.SandboxID, "")
	if status, _, raw := e.do("DELETE", "/volumes/"+v.VolumeID, ""); status != http.StatusNoContent {
		t.Errorf("delete once unmounted: %d %s", status, raw)
	}
	if status, raw := e.content(v.Token, "GET", "/volumecontent/"+v.VolumeID+"/dir", pathQuery("/"), nil, nil); status != http.StatusUnauthorized {
		t.Errorf("content of a deleted volume: %d %s", status, raw)
	}
}

func TestVolumeContentRoutes(t *testing.T) {
	e := volumeEnv(t)
	v := e.createVolume(e.key, `{"name":"files","sizeMB":32}`)
	base := "/volumecontent/" + v.VolumeID
	do := func(method, route string, q url.Values, body string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		return e.content(v.Token, method, base+route, q, rd, nil)
	}
	entry := func(raw []byte) volumeEntryJSON {
		t.Helper()
		var en volumeEntryJSON
		if err := json.Unmarshal(raw, &en); err != nil {
			t.Fatalf("entry %s: %v", raw, err)
		}
		return en
	}

	if status, raw := do("POST", "/dir", pathQuery("/a/b"), ""); status != http.StatusNotFound {
		t.Errorf("mkdir under a missing parent: %d %s", status, raw)
	}
	status, raw := do("POST", "/dir", pathQuery("/a/b", "force", "true", "mode", "488"), "")
	if en := entry(raw); status != http.StatusCreated || en.Type != "directory" || en.Mode != 0o750 || en.Path != "/a/b" {
		t.Errorf("mkdir -p: %d %s", status, raw)
	}
	status, raw = do("PUT", "/file", pathQuery("/a/hello.txt"), "hello, volume")
	if en := entry(raw); status != http.StatusOK || en.Size != 13 || en.Type != "file" || en.UID != volume.DefaultUID {
		t.Errorf("write: %d %s", status, raw)
	}
	status, raw = do("GET", "/file", pathQuery("/a/hello.txt"), "")
	if status != http.StatusOK || string(raw) != "hello, volume" {
		t.Errorf("read: %d %q", status, raw)
	}
	status, raw = do("GET", "/dir", pathQuery("/", "depth", "2"), "")
	var list []volumeEntryJSON
	json.Unmarshal(raw, &list)
	if status != http.StatusOK || len(list) != 3 {
		t.Errorf("list depth 2: %d %s", status, raw)
	}
	status, raw = do("PATCH", "/path", pathQuery("/a/hello.txt"), `{"mode":384,"uid":0}`)
	if en := entry(raw); status != http.StatusOK || en.Mode != 0o600 || en.UID != 0 || en.GID != volume.DefaultGID {
		t.Errorf("update: %d %s", status, raw)
	}
	if status, raw := do("PATCH", "/path", pathQuery("/a/hello.txt"), `{"mode":2541}`); status != http.StatusBadRequest {
		t.Errorf("setuid mode: %d %s", status, raw)
	}
	status, raw = do("GET", "/path", pathQuery("a/../a/hello.txt"), "")
	if en := entry(raw); status != http.StatusOK || en.Path != "/a/hello.txt" || en.Mode != 0o600 {
		t.Errorf("stat: %d %s", status, raw)
	}
	for _, tc := range []struct {
		method, route string
		q             url.Values
		want          int
	}{
		{"GET", "/file", pathQuery("/missing"), http.StatusNotFound},
		{"GET", "/path", pathQuery("/missing"), http.StatusNotFound},
		{"GET", "/dir", pathQuery("/missing"), http.StatusNotFound},
		{"DELETE", "/path", pathQuery("/missing"), http.StatusNotFound},
		{"GET", "/file", pathQuery("/a"), http.StatusBadRequest},
		{"GET", "/file", url.Values{}, http.StatusBadRequest},
		{"GET", "/dir", pathQuery("/", "depth", "x"), http.StatusBadRequest},
		{"PUT", "/file", pathQuery("/x", "uid", "-1"), http.StatusBadRequest},
		{"DELETE", "/path", pathQuery("/"), http.StatusBadRequest},
		{"POST", "/file", pathQuery("/x"), http.StatusMethodNotAllowed},
		{"GET", "/nothing", pathQuery("/x"), http.StatusNotFound},
	} {
		status, raw := do(tc.method, tc.route, tc.q, "")
		var ce contentError
		if status != tc.want || json.Unmarshal(raw, &ce) != nil || ce.Message == "" || ce.Code == "" {
			t.Errorf("%s %s?%s: %d %s, want %d with an error body", tc.method, tc.route, tc.q.Encode(), status, raw, tc.want)
		}
	}
	if status, raw := do("DELETE", "/path", pathQuery("/a"), ""); status != http.StatusNoContent {
		t.Errorf("remove: %d %s", status, raw)
	}
	if status, raw := do("GET", "/dir", pathQuery("/"), ""); status != http.StatusOK || strings.TrimSpace(string(raw)) != "[]" {
		t.Errorf("list after remove: %d %s", status, raw)
	}

	// An upload past the cap answers 507 and leaves the old file.
	do("PUT", "/file", pathQuery("/big"), "old")
	status, raw = e.content(v.Token, "PUT", base+"/file", pathQuery("/big"), bytes.NewReader(make([]byte, 40<<20)), nil)
	if status != http.StatusInsufficientStorage {
		t.Errorf("a 40 MiB upload to a 32 MiB volume: %d %s, want 507", status, raw)
	}
	// Without a length, it is found full as it is written.
	status, raw = e.content(v.Token, "PUT", base+"/file", pathQuery("/big"), io.MultiReader(bytes.NewReader(make([]byte, 40<<20))), http.Header{"Transfer-Encoding": {"chunked"}})
	if status != http.StatusInsufficientStorage || !strings.Contains(string(raw), "full") {
		t.Errorf("a 40 MiB chunked upload to a 32 MiB volume: %d %s, want 507", status, raw)
	}
	if status, raw := do("GET", "/file", pathQuery("/big"), ""); status != http.StatusOK || string(raw) != "old" {
		t.Errorf("the file after failed uploads: %d %q", status, raw)
	}
}

// TestVolumeContentPlantedLinks: links a sandbox planted in a volume do
// not let the content routes read, write or list anything outside it.
func TestVolumeContentPlantedLinks(t *testing.T) {
	e := volumeEnv(t)
	v := e.createVolume(e.key, `{"name":"trap","sizeMB":32}`)
	data := volumeData(t, v.VolumeID)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": "/etc", "out": outside, "up": "../../../../../../../.." + outside} {
		if err := os.Symlink(target, filepath.Join(data, name)); err != nil {
			t.Fatal(err)
		}
	}
	base := "/volumecontent/" + v.VolumeID
	for _, tc := range []struct {
		method, route, path, body string
	}{
		{"GET", "/file", "/etc/passwd", ""},
		{"GET", "/file", "/out/secret", ""},
		{"GET", "/file", "/up/secret", ""},
		{"GET", "/dir", "/out", ""},
		{"GET", "/path", "/out/secret", ""},
		{"PUT", "/file", "/out/new", "pwned"},
		{"PUT", "/file", "/etc/tupper-volume-test", "pwned"},
		{"POST", "/dir", "/out/newdir", ""},
		{"PATCH", "/path", "/out/secret", `{"mode":511}`},
		{"DELETE", "/path", "/out/secret", ""},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		status, raw := e.content(v.Token, tc.method, base+tc.route, pathQuery(tc.path, "force", "true"), body, nil)
		if status != http.StatusBadRequest {
			t.Errorf("%s %s %s through a planted link: %d %s, want 400", tc.method, tc.route, tc.path, status, raw)
		}
		if strings.Contains(string(raw), "host secret") || strings.Contains(string(raw), "root:") {
			t.Errorf("%s %s %s leaked %s", tc.method, tc.route, tc.path, raw)
		}
	}
	entries, _ := os.ReadDir(outside)
	got, _ := os.ReadFile(filepath.Join(outside, "secret"))
	fi, _ := os.Stat(filepath.Join(outside, "secret"))
	if len(entries) != 1 || string(got) != "host secret" || fi.Mode().Perm() != 0o600 {
		t.Errorf("outside the volume: %v, %q, %v", entries, got, fi.Mode())
	}
	if _, err := os.Stat("/etc/tupper-volume-test"); err == nil {
		os.Remove("/etc/tupper-volume-test")
		t.Error("an upload reached the host's /etc")
	}
}

// volumeData is the host directory of volume id's content: the test's
// engine keeps its state in one of the test's temporary directories.
func volumeData(t *testing.T, id string) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "engine", "volumes", id))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("the directory of volume %s: %v %v", id, dirs, err)
	}
	return volume.DataDir(dirs[0])
}
