package files_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestUploadThroughPlantedLinks reproduces "user becomes root through an
// upload": code running as a user links a file or directory of its home to
// root's files, then a harmless upload as that user must not change, create
// or give away anything the user could not write itself. Downloads through
// links read only what the user may read.
func TestUploadThroughPlantedLinks(t *testing.T) {
	requireRoot(t)
	base := newServer(t, files.Config{})
	shared := testutil.SharedTempDir(t)
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	home, system := filepath.Join(shared, "home"), filepath.Join(shared, "system")
	passwd, shadow := filepath.Join(system, "passwd"), filepath.Join(system, "shadow")
	const passwdContent = "root:x:0:0:root:/root:/bin/bash\n"
	for _, d := range []string{home, system} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(passwd, []byte(passwdContent), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shadow, []byte("root:secret-hash:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What nobody's code plants in its home: ln -s /etc/passwd ~/data.csv,
	// ln -s /etc ~/d, ln -s /etc/shadow ~/notes.txt.
	for link, target := range map[string]string{"data.csv": passwd, "d": system, "notes.txt": shadow, "readme": passwd} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	systemUnchanged := func(t *testing.T) {
		t.Helper()
		if got := readFile(t, passwd); got != passwdContent {
			t.Errorf("passwd now holds %q", got)
		}
		for _, p := range []string{system, passwd, shadow} {
			if uid := ownerOf(t, p); uid != 0 {
				t.Errorf("%s now belongs to uid %d, want root", p, uid)
			}
		}
		if des, _ := os.ReadDir(system); len(des) != 2 {
			t.Errorf("system holds %d entries, want passwd and shadow only", len(des))
		}
	}

	uploads := []struct {
		name, path string
	}{
		{"a file linked to root's", filepath.Join(home, "data.csv")},
		{"a new file in a linked directory", filepath.Join(home, "d", "x")},
		{"a new directory in a linked directory", filepath.Join(home, "d", "new", "x")},
		{"root's file by its own name", passwd},
	}
	for _, up := range uploads {
		t.Run("upload "+up.name, func(t *testing.T) {
			status, body := do(t, http.MethodPost, filesURL(base, "path", up.path, "username", "nobody"),
				"application/octet-stream", strings.NewReader("nobody::0:0::/:/bin/sh\n"))
			checkError(t, status, body, http.StatusForbidden)
			if !strings.Contains(string(body), `user \"nobody\" may not write `+up.path) {
				t.Errorf("the error does not say who may not write what: %s", body)
			}
			systemUnchanged(t)
			noTempFiles(t, system)
		})
	}
	t.Run("the error names a link's target", func(t *testing.T) {
		status, body := do(t, http.MethodPost, filesURL(base, "path", filepath.Join(home, "data.csv"), "username", "nobody"),
			"application/octet-stream", strings.NewReader("x"))
		checkError(t, status, body, http.StatusForbidden)
		if !strings.Contains(string(body), "a link to "+passwd) {
			t.Errorf("the error does not name the link's target %s: %s", passwd, body)
		}
	})
	t.Run("multipart upload through a link", func(t *testing.T) {
		body, ct := multipartBody(t, part{"file", filepath.Join(home, "data.csv"), "evil"})
		status, got := do(t, http.MethodPost, filesURL(base, "username", "nobody"), ct, body)
		checkError(t, status, got, http.StatusForbidden)
		systemUnchanged(t)
	})
	t.Run("upload into the user's home", func(t *testing.T) {
		p := filepath.Join(home, "sub", "ok.txt")
		status, body := do(t, http.MethodPost, filesURL(base, "path", p, "username", "nobody"),
			"application/octet-stream", strings.NewReader("fine"))
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		for _, q := range []string{p, filepath.Dir(p)} {
			if uid := ownerOf(t, q); uid != 65534 {
				t.Errorf("%s belongs to uid %d, want nobody's 65534", q, uid)
			}
		}
	})
	t.Run("download a file the user may not read, through a link", func(t *testing.T) {
		status, body := do(t, http.MethodGet, filesURL(base, "path", filepath.Join(home, "notes.txt"), "username", "nobody"), "", nil)
		checkError(t, status, body, http.StatusForbidden)
		if strings.Contains(string(body), "secret-hash") {
			t.Errorf("the error carries the file's content: %s", body)
		}
	})
	t.Run("download a file the user may read, through a link", func(t *testing.T) {
		status, body := do(t, http.MethodGet, filesURL(base, "path", filepath.Join(home, "readme"), "username", "nobody"), "", nil)
		if status != http.StatusOK || string(body) != passwdContent {
			t.Errorf("status %d, body %q; want 200 and the file", status, body)
		}
	})
	t.Run("root writes anywhere", func(t *testing.T) {
		p := filepath.Join(system, "by-root", "f")
		status, body := do(t, http.MethodPost, filesURL(base, "path", p, "username", "root"),
			"application/octet-stream", strings.NewReader("root's"))
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Uid != 0 {
			t.Errorf("root's upload: %v, uid %d", err, st.Uid)
		}
	})
}
