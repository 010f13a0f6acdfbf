package files_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/internal/testutil"
)

const unicodeName = "ünïcødé 文件.txt"

// newServer serves the /files handler over httptest and returns its base
// URL.
func newServer(t *testing.T, cfg files.Config) string {
	t.Helper()
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root" // the host may lack the sandbox's "user"
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	mux := http.NewServeMux()
	mux.Handle("/files", files.New(cfg))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func filesURL(base string, query ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(query); i += 2 {
		q.Set(query[i], query[i+1])
	}
	return base + "/files?" + q.Encode()
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: writes files owned by other users")
	}
}

// part is one multipart part: a form field name, a raw filename (written
// into Content-Disposition as is, like the SDKs do) and the content.
type part struct{ field, filename, data string }

func multipartBody(t *testing.T, parts ...part) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.field, p.filename))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.data)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

type entry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// do sends a request and returns the status and body.
func do(t *testing.T, method, u, contentType string, body io.Reader, header ...string) (int, []byte) {
	t.Helper()
	r, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// checkError checks an error reply's status and JSON shape.
func checkError(t *testing.T, status int, body []byte, want int) {
	t.Helper()
	if status != want {
		t.Fatalf("status = %d, want %d; body %s", status, want, body)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Code != want || e.Message == "" {
		t.Errorf("error body %s: want {\"code\":%d,\"message\":…}", body, want)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Uid
}

// noTempFiles fails if an upload's temporary file was left in dir.
func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".tupper-upload-") {
			t.Errorf("temporary file left behind: %s", de.Name())
		}
	}
}

func TestUploadMultipart(t *testing.T) {
	requireRoot(t)
	base := newServer(t, files.Config{})
	dir := testutil.SharedTempDir(t)
	unicodePath := filepath.Join(dir, "dir with space", unicodeName)
	tests := []struct {
		name   string
		query  []string
		parts  []part
		status int
		want   map[string]string // path → content afterwards
	}{
		{
			name:   "full path as filename, parents created",
			query:  []string{"username", "nobody"},
			parts:  []part{{"file", unicodePath, "hello ünïcødé"}},
			status: 200,
			want:   map[string]string{unicodePath: "hello ünïcødé"},
		},
		{
			name:  "several files",
			query: []string{"username", "nobody"},
			parts: []part{
				{"file", filepath.Join(dir, "m", "one"), "1"},
				{"other", "ignored", "not a file part"},
				{"file", filepath.Join(dir, "m", "two"), "2"},
			},
			status: 200,
			want:   map[string]string{filepath.Join(dir, "m", "one"): "1", filepath.Join(dir, "m", "two"): "2"},
		},
		{
			name:   "path query wins over the filename",
			query:  []string{"path", filepath.Join(dir, "q", "target.txt"), "username", "nobody"},
			parts:  []part{{"file", "blob", "q"}},
			status: 200,
			want:   map[string]string{filepath.Join(dir, "q", "target.txt"): "q"},
		},
		{
			name:   "replaces an existing file",
			query:  []string{"username", "nobody"},
			parts:  []part{{"file", unicodePath, "second"}},
			status: 200,
			want:   map[string]string{unicodePath: "second"},
		},
		{
			name:   "empty file",
			query:  []string{"username", "nobody"},
			parts:  []part{{"file", filepath.Join(dir, "empty"), ""}},
			status: 200,
			want:   map[string]string{filepath.Join(dir, "empty"): ""},
		},
		{
			name:   "two parts, one target",
			query:  []string{"path", filepath.Join(dir, "dup")},
			parts:  []part{{"file", "a", "a"}, {"file", "b", "b"}},
			status: 400,
			want:   map[string]string{filepath.Join(dir, "dup"): "a"},
		},
		{
			name:   "no filename and no path",
			parts:  []part{{"file", "", "x"}},
			status: 400,
		},
		{
			name:   "directory as target",
			parts:  []part{{"file", dir, "x"}},
			status: 400,
		},
		{
			name:   "file as parent",
			parts:  []part{{"file", filepath.Join(dir, "empty", "x"), "x"}},
			status: 400,
		},
		{
			name:   "unknown user",
			query:  []string{"username", "no-such-user-here"},
			parts:  []part{{"file", filepath.Join(dir, "never"), "x"}},
			status: 401,
			want:   map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := multipartBody(t, tt.parts...)
			status, got := do(t, "POST", filesURL(base, tt.query...), ct, body)
			if tt.status != 200 {
				checkError(t, status, got, tt.status)
			} else {
				if status != 200 {
					t.Fatalf("status %d: %s", status, got)
				}
				var entries []entry
				if err := json.Unmarshal(got, &entries); err != nil {
					t.Fatalf("reply %s: %v", got, err)
				}
				var queryPath string
				for i := 0; i+1 < len(tt.query); i += 2 {
					if tt.query[i] == "path" {
						queryPath = tt.query[i+1]
					}
				}
				var want []entry
				for _, p := range tt.parts {
					if p.field != "file" {
						continue
					}
					path := p.filename
					if queryPath != "" {
						path = queryPath
					}
					want = append(want, entry{Name: filepath.Base(path), Type: "file", Path: path})
				}
				if diff := cmp.Diff(want, entries); diff != "" {
					t.Errorf("reply mismatch (-want +got):\n%s", diff)
				}
			}
			for p, content := range tt.want {
				if got := readFile(t, p); got != content {
					t.Errorf("%s = %q, want %q", p, got, content)
				}
				if tt.status == 200 && ownerOf(t, p) != 65534 {
					t.Errorf("%s not owned by nobody", p)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
				t.Error("a refused upload wrote its file")
			}
			noTempFiles(t, filepath.Dir(unicodePath))
		})
	}
	if ownerOf(t, filepath.Join(dir, "dir with space")) != 65534 {
		t.Error("created parent not owned by the uploading user")
	}
	if ownerOf(t, dir) != 0 {
		t.Error("an existing parent changed owner")
	}
}

func TestUploadOctetStream(t *testing.T) {
	base := newServer(t, files.Config{})
	dir := t.TempDir()
	gz := func(s string) io.Reader {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		io.WriteString(w, s)
		w.Close()
		return &b
	}
	tests := []struct {
		name        string
		path        string
		contentType string
		header      []string
		body        io.Reader
		status      int
		want        string
	}{
		{name: "plain", path: filepath.Join(dir, "raw", unicodeName), contentType: "application/octet-stream",
			body: strings.NewReader("raw body"), status: 200, want: "raw body"},
		{name: "gzip", path: filepath.Join(dir, "gz.txt"), contentType: "application/octet-stream",
			header: []string{"Content-Encoding", "gzip"}, body: gz("unzipped"), status: 200, want: "unzipped"},
		{name: "gzip multipart", path: filepath.Join(dir, "gzmp.txt"), contentType: "multipart",
			header: []string{"Content-Encoding", "gzip"}, status: 200, want: "inside"},
		{name: "not gzip", path: filepath.Join(dir, "bad.gz"), contentType: "application/octet-stream",
			header: []string{"Content-Encoding", "gzip"}, body: strings.NewReader("plain"), status: 400},
		{name: "brotli", path: filepath.Join(dir, "br"), contentType: "application/octet-stream",
			header: []string{"Content-Encoding", "br"}, body: strings.NewReader("x"), status: 415},
		{name: "no path", contentType: "application/octet-stream", body: strings.NewReader("x"), status: 400},
		{name: "json body", path: filepath.Join(dir, "j"), contentType: "application/json", body: strings.NewReader("{}"), status: 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := tt.body, tt.contentType
			if ct == "multipart" {
				var mp io.Reader
				mp, ct = multipartBody(t, part{"file", tt.path, tt.want})
				b, _ := io.ReadAll(mp)
				body = gz(string(b))
			}
			query := []string{}
			if tt.path != "" {
				query = []string{"path", tt.path}
			}
			status, got := do(t, "POST", filesURL(base, query...), ct, body, tt.header...)
			if tt.status != 200 {
				checkError(t, status, got, tt.status)
				if tt.path != "" {
					if _, err := os.Stat(tt.path); err == nil {
						t.Errorf("failed upload created %s", tt.path)
					}
				}
				return
			}
			if status != 200 {
				t.Fatalf("status %d: %s", status, got)
			}
			var entries []entry
			json.Unmarshal(got, &entries)
			if diff := cmp.Diff([]entry{{Name: filepath.Base(tt.path), Type: "file", Path: tt.path}}, entries); diff != "" {
				t.Errorf("reply mismatch (-want +got):\n%s", diff)
			}
			if got := readFile(t, tt.path); got != tt.want {
				t.Errorf("content = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUploadKeepsModeAndFollowsLinks(t *testing.T) {
	base := newServer(t, files.Config{})
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte("old"), 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("run.sh", link); err != nil {
		t.Fatal(err)
	}
	status, body := do(t, "POST", filesURL(base, "path", link), "application/octet-stream", strings.NewReader("new"))
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if got := readFile(t, script); got != "new" {
		t.Errorf("link target = %q, want %q", got, "new")
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced by a file")
	}
	if st, _ := os.Stat(script); st.Mode().Perm() != 0o750 {
		t.Errorf("mode = %v, want the old 0750", st.Mode().Perm())
	}
}

// failingReader yields data, then fails as a connection cut short does.
type failingReader struct{ r io.Reader }

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func TestUploadTruncated(t *testing.T) {
	dir := t.TempDir()
	h := files.New(files.Config{DefaultUser: "root", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	target := filepath.Join(dir, "target")
	mustOld := func(t *testing.T) {
		t.Helper()
		if err := os.WriteFile(target, []byte("old content"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, ct := multipartBody(t, part{"file", target, strings.Repeat("new ", 100000)})
	fullBytes, _ := io.ReadAll(full)
	var gzBuf bytes.Buffer
	gw := gzip.NewWriter(&gzBuf)
	gw.Write(bytes.Repeat([]byte("z"), 1<<20))
	gw.Close()
	tests := []struct {
		name        string
		contentType string
		encoding    string
		body        io.Reader
	}{
		{"octet-stream cut", "application/octet-stream", "", &failingReader{strings.NewReader(strings.Repeat("x", 300000))}},
		{"multipart cut mid-part", ct, "", &failingReader{bytes.NewReader(fullBytes[:len(fullBytes)/2])}},
		{"multipart without closing boundary", ct, "", bytes.NewReader(fullBytes[:len(fullBytes)-10])},
		{"gzip cut", "application/octet-stream", "gzip", bytes.NewReader(gzBuf.Bytes()[:gzBuf.Len()/2])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustOld(t)
			r := httptest.NewRequest("POST", filesURL("", "path", target), tt.body)
			if strings.HasPrefix(tt.contentType, "multipart/") {
				// The filename names the target; the path query would too.
				r = httptest.NewRequest("POST", "/files", tt.body)
			}
			r.Header.Set("Content-Type", tt.contentType)
			if tt.encoding != "" {
				r.Header.Set("Content-Encoding", tt.encoding)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			checkError(t, rec.Code, rec.Body.Bytes(), 400)
			if got := readFile(t, target); got != "old content" {
				t.Errorf("target = %.20q…, want the old content", got)
			}
			noTempFiles(t, dir)
		})
	}
}

func TestUploadConnectionCut(t *testing.T) {
	// A real connection that promises more bytes than it sends, then
	// half-closes: the server sees the body end early.
	base := newServer(t, files.Config{})
	target := filepath.Join(t.TempDir(), "never")
	u, _ := url.Parse(filesURL(base, "path", target))
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := c.(*net.TCPConn)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n", u.RequestURI(), u.Host)
	conn.Write(bytes.Repeat([]byte("a"), 500000))
	conn.CloseWrite()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	checkError(t, res.StatusCode, body, 400)
	if _, err := os.Stat(target); err == nil {
		t.Error("a cut-short upload left a file")
	}
	noTempFiles(t, filepath.Dir(target))
}

func TestDownload(t *testing.T) {
	base := newServer(t, files.Config{})
	dir := testutil.SharedTempDir(t)
	p := filepath.Join(dir, "dir with space", unicodeName)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	content := strings.Repeat("Tupper downloads stream. ", 1000)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// Compression is checked on the wire, so the transport must not undo it.
	raw := &http.Transport{DisableCompression: true}
	tests := []struct {
		name           string
		query          []string
		header         []string
		status         int
		wantEncoding   string
		wantBody       string
		wantDisposName bool
	}{
		{name: "plain", query: []string{"path", p}, status: 200, wantBody: content, wantDisposName: true},
		{name: "node fetch asks gzip, deflate: identity", query: []string{"path", p},
			header: []string{"Accept-Encoding", "gzip, deflate"}, status: 200, wantBody: content},
		{name: "gzip preferred", query: []string{"path", p},
			header: []string{"Accept-Encoding", "gzip;q=1, identity;q=0.5"}, status: 200, wantEncoding: "gzip", wantBody: content},
		{name: "identity refused", query: []string{"path", p},
			header: []string{"Accept-Encoding", "gzip, identity;q=0"}, status: 200, wantEncoding: "gzip", wantBody: content},
		{name: "range", query: []string{"path", p}, header: []string{"Range", "bytes=0-5"}, status: 206, wantBody: content[:6]},
		{name: "as named user", query: []string{"path", p, "username", "nobody"}, status: 200, wantBody: content},
		{name: "directory", query: []string{"path", dir}, status: 400},
		{name: "missing", query: []string{"path", filepath.Join(dir, "missing")}, status: 404},
		{name: "no path", status: 400},
		{name: "unknown user", query: []string{"path", p, "username", "no-such-user-here"}, status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", filesURL(base, tt.query...), nil)
			for i := 0; i+1 < len(tt.header); i += 2 {
				r.Header.Set(tt.header[i], tt.header[i+1])
			}
			res, err := raw.RoundTrip(r)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if tt.status >= 400 {
				checkError(t, res.StatusCode, body, tt.status)
				return
			}
			if res.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d; %s", res.StatusCode, tt.status, body)
			}
			if got := res.Header.Get("Content-Encoding"); got != tt.wantEncoding {
				t.Errorf("Content-Encoding = %q, want %q", got, tt.wantEncoding)
			}
			if tt.wantEncoding == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			} else if res.ContentLength != int64(len(tt.wantBody)) {
				t.Errorf("Content-Length = %d, want %d", res.ContentLength, len(tt.wantBody))
			}
			if string(body) != tt.wantBody {
				t.Errorf("body differs: got %d bytes, want %d", len(body), len(tt.wantBody))
			}
			if got := res.Header.Get("Content-Type"); got != "application/octet-stream" {
				t.Errorf("Content-Type = %q", got)
			}
			if tt.wantDisposName {
				want := `attachment; filename*=utf-8''%C3%BCn%C3%AFc%C3%B8d%C3%A9%20%E6%96%87%E4%BB%B6.txt`
				if got := res.Header.Get("Content-Disposition"); got != want {
					t.Errorf("Content-Disposition = %q, want %q", got, want)
				}
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	base := newServer(t, files.Config{})
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		t.Run(m, func(t *testing.T) {
			status, body := do(t, m, filesURL(base, "path", "/tmp"), "", nil)
			checkError(t, status, body, http.StatusMethodNotAllowed)
		})
	}
}
