package sdk

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestIgnoreMatcher checks .dockerignore's rules: globs within a path
// element, ** across them, a directory's pattern leaving out what is
// under it, and the last matching pattern winning, exceptions included.
func TestIgnoreMatcher(t *testing.T) {
	m, err := newIgnoreMatcher([]string{
		"# a comment", "", "*.log", "!keep.log", "**/node_modules", "/build/", ".git", "docs/*.md", "!docs/README.md", "te?t",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want bool
	}{
		{"app.log", true},
		{"keep.log", false},
		{"src/app.log", false}, // "*.log" is rooted: one element
		{"node_modules", true},
		{"web/node_modules/x/y.js", true},
		{"build/out.bin", true},
		{"builder/main.go", false},
		{".git/HEAD", true},
		{".gitignore", false},
		{"docs/a.md", true},
		{"docs/README.md", false},
		{"docs/sub/a.md", false},
		{"test", true},
		{"tests", false},
		{"main.py", false},
	}
	for _, tt := range tests {
		if got := m.ignored(tt.path); got != tt.want {
			t.Errorf("ignored(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	if _, err := newIgnoreMatcher([]string{"[abc"}); err == nil {
		t.Error("an unterminated [ was taken")
	}
}

// writeTree makes files (path → content; a trailing "/" makes a
// directory, "->target" a link) under a new directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		switch {
		case p[len(p)-1] == '/':
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		case len(content) > 2 && content[:2] == "->":
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.Symlink(content[2:], full); err != nil {
				t.Fatal(err)
			}
		default:
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestCopyArchive checks what a COPY step sends: the matched paths and
// everything under a matched directory, relative to the context, links as
// links, ignored files left out; a changed file changes the hash.
func TestCopyArchive(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"app/main.py":           "print(1)\n",
		"app/lib/util.py":       "X = 42\n",
		"app/.env":              "hidden but taken\n",
		"app/debug.log":         "left out\n",
		"app/link":              "->lib/util.py",
		"app/node_modules/x.js": "left out\n",
		"other.txt":             "not copied\n",
		".dockerignore":         "**/*.log\n**/node_modules\n",
	})
	tpl := &Template{ContextDir: dir}
	tpl.Copy("app", "/srv/app", "", 0)
	spec := tpl.spec()
	files, err := tpl.copyFiles(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	hash := spec.Steps[0].FilesHash
	if len(hash) != 64 {
		t.Fatalf("files hash %q", hash)
	}
	rc, size, err := files.archive(0)()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		switch h.Typeflag {
		case tar.TypeDir:
			got[h.Name] = "dir"
		case tar.TypeSymlink:
			got[h.Name] = "->" + h.Linkname
		default:
			got[h.Name] = string(data)
		}
	}
	want := map[string]string{
		"app/": "dir", "app/lib/": "dir", "app/main.py": "print(1)\n", "app/lib/util.py": "X = 42\n",
		"app/.env": "hidden but taken\n", "app/link": "->lib/util.py",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}
	if size <= 0 {
		t.Errorf("archive size %d", size)
	}

	// The same files hash the same; a changed one does not.
	again := tpl.spec()
	f2, err := tpl.copyFiles(again)
	if err != nil {
		t.Fatal(err)
	}
	f2.close()
	if again.Steps[0].FilesHash != hash {
		t.Error("the hash of unchanged files changed")
	}
	os.WriteFile(filepath.Join(dir, "app/main.py"), []byte("print(2)\n"), 0o644)
	changed := tpl.spec()
	f3, err := tpl.copyFiles(changed)
	if err != nil {
		t.Fatal(err)
	}
	f3.close()
	if changed.Steps[0].FilesHash == hash {
		t.Error("a changed file kept the hash")
	}
}

// TestCopySourceStaysInContext checks that a COPY reaches nothing outside
// the context through a link, and that a source matching nothing fails.
func TestCopySourceStaysInContext(t *testing.T) {
	outside := writeTree(t, map[string]string{"secret.txt": "no\n"})
	dir := writeTree(t, map[string]string{"out": "->" + outside, "a.txt": "yes\n"})
	for _, src := range []string{"out/secret.txt", "nothing*", "missing.txt"} {
		tpl := &Template{ContextDir: dir}
		tpl.Copy(src, "/x", "", 0)
		files, err := tpl.copyFiles(tpl.spec())
		if err == nil {
			files.close()
			t.Errorf("COPY %s was taken", src)
		}
	}
	// The link itself is copied as a link.
	tpl := &Template{ContextDir: dir}
	tpl.Copy("out", "/x", "", 0)
	files, err := tpl.copyFiles(tpl.spec())
	if err != nil {
		t.Fatal(err)
	}
	defer files.close()
	if e := files.entries[0]; len(e) != 1 || e[0].link != outside {
		t.Errorf("entries of a link: %+v", e)
	}
}
