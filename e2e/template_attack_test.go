package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTemplateAttacks checks, against a real `tupper serve` on runsc, that
// the template API keeps one team's templates from another's: a team with
// an API key of its own neither starts sandboxes from another team's
// template (by name or id), builds on it, takes over the names of the
// daemon's templates and images (which every team's sandboxes start from),
// learns of or uses another team's uploaded files (even under the same
// files hash, which the client computes and the daemon cannot check), gets
// another team's layers from the build cache, nor sees the sandboxes that
// run another team's builds.
func TestTemplateAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds templates in gVisor sandboxes")
	}
	d := startServeDaemon(t, "--build-egress", "deny")
	blue := d.addKey(t, "--team", "blue", "--name", "blue")
	as := func(key string) *serveDaemon { k := *d; k.Key = key; return &k }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := randomHexN(t, 6)

	// The default team's template: a secret file, and files a COPY step
	// uploaded under a hash that another team may well compute too (it
	// is the hash of the files and their destination).
	filesHash := randomHexN(t, 32)
	secretName := "attack-secret-" + run
	secret := requestTemplate(ctx, t, d, secretName)
	uploadFiles(ctx, t, d, secret.TemplateID, filesHash, map[string]string{"f.txt": "the default team's files\n"})
	steps := []any{
		map[string]any{"type": "RUN", "args": []string{"echo s3cret-" + run + " > /etc/team-secret", "root"}},
		map[string]any{"type": "COPY", "args": []string{"f.txt", "/opt/files/"}, "filesHash": filesHash},
	}
	buildTemplate(ctx, t, d, secret, map[string]any{"fromTemplate": "base", "steps": steps}, "ready")

	t.Run("create from another team's template", func(t *testing.T) {
		for _, ref := range []string{secretName, secret.TemplateID, secretName + ":latest"} {
			status, body, err := as(blue).api(ctx, http.MethodPost, "/sandboxes", map[string]any{"templateID": ref})
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusNotFound {
				t.Errorf("blue creating from the default team's template %s: %d %s, want 404", ref, status, body)
			}
		}
	})

	t.Run("build on another team's template", func(t *testing.T) {
		for _, from := range []string{"fromTemplate", "fromImage"} {
			tpl := requestTemplate(ctx, t, as(blue), "attack-from-"+strings.ToLower(from)+"-"+run)
			buildTemplate(ctx, t, as(blue), tpl, map[string]any{from: secretName, "steps": []any{}}, "error")
		}
	})

	t.Run("names of the daemon's templates and images", func(t *testing.T) {
		// Only asked for, never built: a build named "base" would
		// rename the test image store's base, which other tests share.
		for _, key := range []string{blue, d.Key} {
			for _, name := range []string{"base", "code-interpreter", "code-interpreter-v1"} {
				status, body, err := as(key).api(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": name})
				if err != nil {
					t.Fatal(err)
				}
				if status < 400 || status >= 500 {
					t.Errorf("a template named %q: %d %s, want it refused (4xx)", name, status, body)
				}
			}
		}
		status, body, _ := as(blue).api(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": secretName})
		if status != http.StatusConflict {
			t.Errorf("blue naming a template as the default team's: %d %s, want 409", status, body)
		}
	})

	t.Run("uploads and the build cache are the team's own", func(t *testing.T) {
		tpl := requestTemplate(ctx, t, as(blue), "attack-copy-"+run)
		// Blue computed the same hash for files of its own: it must be
		// asked for them, and its build of the same steps must use
		// them, not the default team's layers from the cache.
		uploadFiles(ctx, t, as(blue), tpl.TemplateID, filesHash, map[string]string{"f.txt": "blue's own files\n"})
		// A last step that takes a while, so that the build sandbox is
		// there to look for.
		blueSteps := append(steps, map[string]any{"type": "RUN", "args": []string{"sleep 5"}})
		buildTemplate(ctx, t, as(blue), tpl, map[string]any{"fromTemplate": "base", "steps": blueSteps}, "building")
		// While blue's build runs, its sandbox is not the default
		// team's to see.
		waitBuildLog(ctx, t, as(blue), tpl, "[3/3]")
		if ids := d.sandboxIDs(ctx, t); len(ids) != 0 {
			t.Errorf("the default team sees sandboxes %v while only blue's build runs", ids)
		}
		waitBuild(ctx, t, as(blue), tpl, "ready")

		got := readFromTemplate(ctx, t, as(blue), tpl.TemplateID, "/opt/files/f.txt")
		if got != "blue's own files\n" {
			t.Errorf("blue's template holds %q from its COPY step, want its own files", got)
		}
	})

	t.Run("a base pull does not reach the host's own network", func(t *testing.T) {
		// A service on the host's loopback, as a database's admin page or
		// the daemon's own API would be: a pull of a base named there
		// would be the daemon's request, from the host, which no
		// sandbox's egress policy covers.
		var hits []string
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits = append(hits, r.Method+" "+r.URL.Path)
			mu.Unlock()
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "internal-only-data")
		}))
		defer srv.Close()
		host := strings.TrimPrefix(srv.URL, "http://")
		tpl := requestTemplate(ctx, t, as(blue), "attack-pull-"+run)
		buildTemplate(ctx, t, as(blue), tpl, map[string]any{"fromImage": host + "/probe:1", "steps": []any{}}, "error")
		mu.Lock()
		defer mu.Unlock()
		if len(hits) != 0 {
			t.Errorf("a build's base pull sent %v to a service on the host's loopback", hits)
		}
		if logs := strings.Join(getBuild(ctx, t, as(blue), tpl).Logs, "\n"); strings.Contains(logs, "internal-only-data") {
			t.Errorf("the build's log shows what the host's service answered:\n%s", logs)
		}
	})

	t.Run("an upload URL outlives no template", func(t *testing.T) {
		// Blue asks for a URL by its template's name, deletes the
		// template, and another team takes the name: the URL puts
		// nothing among that team's files.
		reused := "attack-reused-" + run
		tpl := requestTemplate(ctx, t, as(blue), reused)
		hash := randomHexN(t, 32)
		link := uploadLink(ctx, t, as(blue), reused, hash)
		if status, body, _ := as(blue).api(ctx, http.MethodDelete, "/templates/"+tpl.TemplateID, nil); status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", status, body)
		}
		taken := requestTemplate(ctx, t, d, reused)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, link, strings.NewReader("blue's files"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("an upload to the URL of a deleted template whose name another team took: %s, want it refused", resp.Status)
		}
		uploadLink(ctx, t, d, taken.TemplateID, hash) // fails unless the files are asked for
	})

	t.Run("malformed requests", func(t *testing.T) {
		tpl := requestTemplate(ctx, t, as(blue), "attack-malformed-"+run)
		build := "/v2/templates/" + tpl.TemplateID + "/builds/" + tpl.BuildID
		many := make([]any, 10_000)
		for i := range many {
			many[i] = map[string]any{"type": "ENV", "args": []string{"A", "1"}}
		}
		for _, tt := range []struct {
			name, path string
			body       any
			want       int
		}{
			{"10,000 steps", build, map[string]any{"steps": many}, http.StatusBadRequest},
			{"a body over 1 MiB", build, map[string]any{"steps": []any{map[string]any{"type": "RUN", "args": []string{strings.Repeat("x", 2<<20)}}}}, http.StatusBadRequest},
			{"an unknown instruction", build, map[string]any{"steps": []any{map[string]any{"type": "ADD", "args": []string{"a", "b"}}}}, http.StatusBadRequest},
			{"RUN without a command", build, map[string]any{"steps": []any{map[string]any{"type": "RUN", "args": []string{}}}}, http.StatusBadRequest},
			{"COPY of files never uploaded", build, map[string]any{"steps": []any{map[string]any{"type": "COPY", "args": []string{"a", "/b"}, "filesHash": randomHexN(t, 32)}}}, http.StatusConflict},
			{"COPY with a hash that is a path", build, map[string]any{"steps": []any{map[string]any{"type": "COPY", "args": []string{"a", "/b"}, "filesHash": "../../../../etc/passwd"}}}, http.StatusConflict},
			{"registry credentials", build, map[string]any{"fromImage": "x", "fromImageRegistry": map[string]any{"type": "registry", "username": "u", "password": "p"}, "steps": []any{}}, http.StatusNotImplemented},
			{"a name with a slash", "/v3/templates", map[string]any{"name": "a/b"}, http.StatusBadRequest},
			{"a name going up", "/v3/templates", map[string]any{"name": "../x"}, http.StatusBadRequest},
			{"no name", "/v3/templates", map[string]any{}, http.StatusBadRequest},
			{"a bad tag", "/v3/templates", map[string]any{"name": "attack-tag-" + run, "tags": []string{"../x"}}, http.StatusBadRequest},
		} {
			status, body, err := as(blue).api(ctx, http.MethodPost, tt.path, tt.body)
			if err != nil || status != tt.want {
				t.Errorf("%s: %d %.200s %v, want %d", tt.name, status, body, err, tt.want)
			}
		}
		// None of them started the build.
		if st := getBuild(ctx, t, as(blue), tpl).Status; st != "waiting" {
			t.Errorf("the build after the malformed requests: %s, want waiting", st)
		}
	})

	t.Run("upload URLs", func(t *testing.T) {
		tpl := requestTemplate(ctx, t, as(blue), "attack-urls-"+run)
		hash := randomHexN(t, 32)
		link := uploadLink(ctx, t, as(blue), tpl.TemplateID, hash)
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		other := randomHexN(t, 32)
		for _, tt := range []struct{ name, path, query string }{
			{"another hash", strings.Replace(u.Path, hash, other, 1), u.RawQuery},
			{"another template", strings.Replace(u.Path, tpl.TemplateID, secret.TemplateID, 1), u.RawQuery},
			{"a later expiry", u.Path, strings.Replace(u.RawQuery, "expires=", "expires=9", 1)},
			{"no signature", u.Path, "expires=" + u.Query().Get("expires")},
			{"a path above the uploads", "/template-uploads/" + tpl.TemplateID + "/../../" + hash, u.RawQuery},
			{"a hash that is not hex", "/template-uploads/" + tpl.TemplateID + "/" + strings.Repeat("z", 64), u.RawQuery},
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPut, d.URL+tt.path+"?"+tt.query, strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("an upload to a URL with %s: %s, want it refused", tt.name, resp.Status)
			}
		}
	})

	t.Run("a build's output does not swell the catalog", func(t *testing.T) {
		// Each step prints 3 MB, one line: more than a build's log keeps.
		var steps []any
		for range 4 {
			steps = append(steps, map[string]any{"type": "RUN", "args": []string{"head -c 3000000 /dev/zero | tr '\\0' x; echo # " + run}})
		}
		tpl := requestTemplate(ctx, t, as(blue), "attack-output-"+run)
		buildTemplate(ctx, t, as(blue), tpl, map[string]any{"fromTemplate": "base", "steps": steps}, "ready")
		if fi, err := os.Stat(filepath.Join(d.Root, "templates", "templates.json")); err != nil || fi.Size() > 1<<20 {
			t.Errorf("the catalog of templates after the build: %v, %v; want under 1 MiB", fi.Size(), err)
		}
		status, body, err := as(blue).api(ctx, http.MethodGet, "/templates/"+tpl.TemplateID+"/builds/"+tpl.BuildID+"/status", nil)
		if err != nil || status != http.StatusOK || len(body) > 12<<20 || !strings.Contains(string(body), "log is full") {
			t.Errorf("the build's status: %d, %d bytes, %v; want under 12 MiB, saying its log is full", status, len(body), err)
		}
	})

	// Last: its builds hold the builder's turns until the daemon stops.
	t.Run("bounds on a team's templates and builds", func(t *testing.T) {
		green := as(d.addKey(t, "--team", "green", "--name", "green"))
		// Requests of builds of one template: the template keeps the
		// newest of them.
		var last templateRef
		for range 60 {
			last = requestTemplate(ctx, t, green, "bounds-"+run)
		}
		status, body, _ := green.api(ctx, http.MethodGet, "/templates/"+last.TemplateID, nil)
		var info struct {
			Builds []struct {
				BuildID string `json:"buildID"`
			} `json:"builds"`
		}
		json.Unmarshal(body, &info)
		if status != http.StatusOK || len(info.Builds) > 50 || info.Builds[len(info.Builds)-1].BuildID != last.BuildID {
			t.Errorf("a template after 60 requested builds: %d, %d builds, want at most 50 with the newest", status, len(info.Builds))
		}
		// Templates: up to 500 (one made above).
		for i := range 499 {
			requestTemplate(ctx, t, green, fmt.Sprintf("bounds-%s-%d", run, i))
		}
		status, body, _ = green.api(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": "bounds-one-more-" + run})
		if status != http.StatusConflict || !strings.Contains(string(body), "delete one first") {
			t.Errorf("a team's template past 500: %d %s, want 409 saying what to do", status, body)
		}
		// Builds under way: four, then "come back later".
		sleep := map[string]any{"fromTemplate": "base", "steps": []any{map[string]any{"type": "RUN", "args": []string{"sleep 120 # " + run}}}}
		for range 4 {
			ref := requestTemplate(ctx, t, green, "bounds-"+run)
			buildTemplate(ctx, t, green, ref, sleep, "building")
		}
		ref := requestTemplate(ctx, t, green, "bounds-"+run)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+"/v2/templates/"+ref.TemplateID+"/builds/"+ref.BuildID, strings.NewReader(`{"fromTemplate":"base","steps":[]}`))
		req.Header.Set("X-API-KEY", green.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Errorf("a fifth build under way: %s (Retry-After %q), want 429 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
		}
		// Another team's builds are not held back by green's.
		other := requestTemplate(ctx, t, as(blue), "bounds-blue-"+run)
		buildTemplate(ctx, t, as(blue), other, map[string]any{"fromTemplate": "base", "steps": []any{}}, "building")
	})
}

// templateRef is a template and the build that POST /v3/templates made.
type templateRef struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
}

// requestTemplate asks for a build of a template named name.
func requestTemplate(ctx context.Context, t *testing.T, d *serveDaemon, name string) templateRef {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodPost, "/v3/templates", map[string]any{"name": name})
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("request a build of %s: %d %s %v", name, status, body, err)
	}
	var ref templateRef
	if err := json.Unmarshal(body, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// uploadLink asks for the upload URL of the files of hash for template id.
func uploadLink(ctx context.Context, t *testing.T, d *serveDaemon, id, hash string) string {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodGet, "/templates/"+id+"/files/"+hash, nil)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("files %s of %s: %d %s %v", hash, id, status, body, err)
	}
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	json.Unmarshal(body, &link)
	if link.Present || link.URL == "" {
		t.Fatalf("files %s of %s: %s, want them asked for", hash, id, body)
	}
	return link.URL
}

// uploadFiles uploads files, as a tar, as the files of hash for template
// id; the daemon must ask for them (uploadLink).
func uploadFiles(ctx context.Context, t *testing.T, d *serveDaemon, id, hash string, files map[string]string) {
	t.Helper()
	link := uploadLink(ctx, t, d, id, hash)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		io.WriteString(tw, content)
	}
	tw.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, link, &buf)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload %s: %s", hash, resp.Status)
	}
}

// buildTemplate starts ref's build on spec and waits until its status is
// want ("building" waits for nothing more).
func buildTemplate(ctx context.Context, t *testing.T, d *serveDaemon, ref templateRef, spec map[string]any, want string) {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodPost, "/v2/templates/"+ref.TemplateID+"/builds/"+ref.BuildID, spec)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusAccepted {
		if want == "error" && status >= 400 && status < 500 {
			return // refused at once
		}
		t.Fatalf("start build %s: %d %s", ref.BuildID, status, body)
	}
	if want != "building" {
		waitBuild(ctx, t, d, ref, want)
	}
}

// buildStatus is what GET …/builds/{id}/status answers.
type buildStatus struct {
	Status string   `json:"status"`
	Logs   []string `json:"logs"`
}

func getBuild(ctx context.Context, t *testing.T, d *serveDaemon, ref templateRef) buildStatus {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodGet, "/templates/"+ref.TemplateID+"/builds/"+ref.BuildID+"/status", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("build status: %d %s %v", status, body, err)
	}
	var bs buildStatus
	json.Unmarshal(body, &bs)
	return bs
}

// waitBuild waits until ref's build ends, and fails unless it ends as
// want.
func waitBuild(ctx context.Context, t *testing.T, d *serveDaemon, ref templateRef, want string) {
	t.Helper()
	var bs buildStatus
	waitUntil(t, 5*time.Minute, "build "+ref.BuildID+" to end", func() bool {
		bs = getBuild(ctx, t, d, ref)
		return bs.Status == "ready" || bs.Status == "error"
	})
	if bs.Status != want {
		t.Fatalf("build %s of %s ended %s, want %s; its log:\n%s", ref.BuildID, ref.TemplateID, bs.Status, want, strings.Join(bs.Logs, "\n"))
	}
}

// waitBuildLog waits until ref's build log has a line holding s, and
// fails if the build ends first.
func waitBuildLog(ctx context.Context, t *testing.T, d *serveDaemon, ref templateRef, s string) {
	t.Helper()
	var bs buildStatus
	waitUntil(t, 5*time.Minute, "build "+ref.BuildID+" to log "+s, func() bool {
		bs = getBuild(ctx, t, d, ref)
		return bs.Status != "building" || strings.Contains(strings.Join(bs.Logs, "\n"), s)
	})
	if bs.Status != "building" {
		t.Fatalf("build %s ended %s before it logged %q; its log:\n%s", ref.BuildID, bs.Status, s, strings.Join(bs.Logs, "\n"))
	}
}

// readFromTemplate starts a sandbox of template ref, reads file path in
// it, and kills it.
func readFromTemplate(ctx context.Context, t *testing.T, d *serveDaemon, ref, path string) string {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodPost, "/sandboxes", map[string]any{"templateID": ref})
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create from %s: %d %s %v", ref, status, body, err)
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	json.Unmarshal(body, &sb)
	defer d.api(context.WithoutCancel(ctx), http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/files?path="+url.QueryEscape(path), nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read %s in a sandbox of %s: %s %s", path, ref, resp.Status, data)
	}
	return string(data)
}

func randomHexN(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
