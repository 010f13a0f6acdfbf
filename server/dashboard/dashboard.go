// Package dashboard serves the files of the web dashboard of `tupper
// serve`: a page bundled at build time from the sources in web/ (by
// scripts/setup.sh, or `npm ci && npm run build` there) into dist/, which
// is embedded in the binary, so that the daemon stays one file and fetches
// nothing at run time. The bundle is not kept in git: a binary built
// without it serves a page that says how to build it.
//
// The page talks to the daemon as any client does, with an API key (see
// package server for the sign-in links that stand in for one); the files
// themselves are public and hold no secret.
package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard/"

//go:embed dist
var dist embed.FS

// Embedded returns the files embedded in the binary: the bundle, or only
// a placeholder when it was not built.
func Embedded() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it cannot be missing.
	}
	return sub
}

// Built reports whether files holds a bundle: an index.html.
func Built(files fs.FS) bool {
	_, err := fs.Stat(files, "index.html")
	return err == nil
}

// securityPolicy keeps the page to its own files and origin: no script
// but the bundle's, no framing by other sites, no referrer that could
// carry a path out. Inline styles are allowed because the terminal
// emulator sets its own.
const securityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// asset is one file, ready to serve.
type asset struct {
	data, gzipped []byte
	etag, ctype   string
}

// Handler serves files under Prefix (GET and HEAD): index.html for the
// prefix itself, 404 for what files does not hold. Without a bundle in
// files it answers every path with a page saying how to build one. Files
// are read, compressed and hashed once, at the first request; answers
// carry an ETag and must be revalidated, since the names do not change
// between builds.
func Handler(files fs.FS) http.Handler {
	load := sync.OnceValues(func() (map[string]*asset, error) { return loadAssets(files) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", securityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		if name == "" {
			name = "index.html"
		}
		assets, err := load()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, ok := assets["index.html"]; !ok {
			h.Set("Cache-Control", "no-store")
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(notBuiltPage))
			return
		}
		a, ok := assets[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Add("Vary", "Accept-Encoding")
		if r.Header.Get("If-None-Match") == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body := a.data
		if a.gzipped != nil && acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = a.gzipped
		}
		h.Set("Content-Length", fmt.Sprint(len(body)))
		if r.Method == http.MethodHead {
			return
		}
		w.Write(body)
	})
}

// loadAssets reads every regular file of files at the top level.
func loadAssets(files fs.FS) (map[string]*asset, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	out := map[string]*asset{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		sum := sha256.Sum256(data)
		a := &asset{data: data, etag: `"` + hex.EncodeToString(sum[:16]) + `"`, ctype: contentType(e.Name())}
		if len(data) > 1024 && compressible(a.ctype) {
			a.gzipped = gzipped(data)
		}
		out[e.Name()] = a
	}
	return out, nil
}

func contentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || strings.Contains(ctype, "javascript") || strings.Contains(ctype, "json")
}

func gzipped(data []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(data)
	zw.Close()
	return buf.Bytes()
}

// acceptsGzip reports whether r's Accept-Encoding takes gzip, q=0 being
// a refusal.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// notBuiltPage is what a binary built without the bundle shows.
const notBuiltPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tupper: dashboard not built</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:40em;margin:10vh auto;padding:0 1em;color:#1f2937}code,pre{background:#f3f4f6;padding:2px 4px;border-radius:4px}pre{padding:8px 12px}</style>
</head><body>
<h1>The dashboard was not built into this tupper</h1>
<p>The web dashboard is bundled from <code>web/</code> with npm before the Go build embeds it.
This binary was built without it. In a checkout of Tupper, run</p>
<pre>scripts/setup.sh</pre>
<p>(which <code>make run</code> and <code>make test</code> call), or by hand:</p>
<pre>cd web &amp;&amp; npm ci &amp;&amp; npm run build &amp;&amp; cd .. &amp;&amp; go build -o bin/tupper ./cmd/tupper</pre>
<p>then restart <code>tupper serve</code>. The API works without it.</p>
</body></html>
`
