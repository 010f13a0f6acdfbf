package dashboard

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string, header map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestServesTheBundle(t *testing.T) {
	script := strings.Repeat("console.log('tupper');\n", 200)
	files := fstest.MapFS{
		"index.html":      {Data: []byte("<!doctype html><title>Tupper</title>")},
		"app.js":          {Data: []byte(script)},
		"app.css":         {Data: []byte("body{}")},
		"placeholder.txt": {Data: []byte("kept in git")},
	}
	h := Handler(files)
	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
		ctype, encoding    string
		body               string
	}{
		{name: "the prefix is the page", method: "GET", path: "/dashboard/", status: 200, ctype: "text/html; charset=utf-8", body: "<!doctype html><title>Tupper</title>"},
		{name: "script", method: "GET", path: "/dashboard/app.js", status: 200, ctype: "text/javascript; charset=utf-8", body: script},
		{name: "script, gzipped for who takes it", method: "GET", path: "/dashboard/app.js", header: map[string]string{"Accept-Encoding": "br, gzip"}, status: 200, ctype: "text/javascript; charset=utf-8", encoding: "gzip", body: script},
		{name: "gzip refused", method: "GET", path: "/dashboard/app.js", header: map[string]string{"Accept-Encoding": "gzip;q=0"}, status: 200, ctype: "text/javascript; charset=utf-8", body: script},
		{name: "a small file is not worth compressing", method: "GET", path: "/dashboard/app.css", header: map[string]string{"Accept-Encoding": "gzip"}, status: 200, ctype: "text/css; charset=utf-8", body: "body{}"},
		{name: "head", method: "HEAD", path: "/dashboard/app.js", status: 200, ctype: "text/javascript; charset=utf-8"},
		{name: "unknown file", method: "GET", path: "/dashboard/nope.js", status: 404},
		{name: "no directories", method: "GET", path: "/dashboard/../dashboard.go", status: 404},
		{name: "no other methods", method: "POST", path: "/dashboard/app.js", status: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := get(t, h, tt.method, tt.path, tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if tt.status != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if got := resp.Header.Get("Content-Encoding"); got != tt.encoding {
				t.Errorf("Content-Encoding %q, want %q", got, tt.encoding)
			}
			raw := body(t, resp)
			if tt.encoding == "gzip" {
				zr, err := gzip.NewReader(strings.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				data, err := io.ReadAll(zr)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) >= len(data) {
					t.Errorf("gzipped %d bytes into %d", len(data), len(raw))
				}
				raw = string(data)
			}
			if raw != tt.body {
				t.Errorf("body %.60q…, want %.60q…", raw, tt.body)
			}
		})
	}

	// A browser revalidates, and an unchanged file costs no body.
	first := get(t, h, "GET", "/dashboard/app.js", nil)
	etag := first.Header.Get("ETag")
	if etag == "" || first.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, first.Header.Get("Cache-Control"))
	}
	again := get(t, h, "GET", "/dashboard/app.js", map[string]string{"If-None-Match": etag})
	if again.StatusCode != http.StatusNotModified || body(t, again) != "" {
		t.Errorf("revalidation: %d", again.StatusCode)
	}
	if other := get(t, h, "GET", "/dashboard/app.css", nil).Header.Get("ETag"); other == etag {
		t.Error("two files share an ETag")
	}

	// Without the slash, the page's relative links would miss.
	resp := get(t, h, "GET", "/dashboard", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/dashboard/" {
		t.Errorf("/dashboard: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestNotBuilt(t *testing.T) {
	h := Handler(fstest.MapFS{"placeholder.txt": {Data: []byte("kept in git")}})
	for _, path := range []string{"/dashboard/", "/dashboard/app.js"} {
		resp := get(t, h, "GET", path, nil)
		text := body(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(text, "scripts/setup.sh") || !strings.Contains(text, "npm ci") {
			t.Errorf("GET %s without a bundle: %d %q", path, resp.StatusCode, text)
		}
	}
	if Built(fstest.MapFS{}) || !Built(fstest.MapFS{"index.html": {}}) {
		t.Error("Built is wrong")
	}
}

// TestEmbedded checks the binary's own files: the placeholder always, and
// when the bundle was built, a page that loads the bundle's script.
func TestEmbedded(t *testing.T) {
	files := Embedded()
	if _, err := files.Open("placeholder.txt"); err != nil {
		t.Fatalf("the placeholder is not embedded: %v", err)
	}
	if !Built(files) {
		t.Log("the bundle is not built here: scripts/setup.sh builds it")
		return
	}
	resp := get(t, Handler(files), "GET", "/dashboard/", nil)
	page := body(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(page, `src="app.js"`) {
		t.Errorf("the embedded page: %d %q", resp.StatusCode, page)
	}
	script := get(t, Handler(files), "GET", "/dashboard/app.js", nil)
	if data := body(t, script); script.StatusCode != 200 || !bytes.Contains([]byte(data), []byte("xterm")) {
		t.Errorf("the embedded script: %d, %d bytes", script.StatusCode, len(data))
	}
}
