package template

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type ent struct {
	name, body string
	typ        byte
	mod        time.Time
}

func writeTar(t *testing.T, path string, ents ...ent) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), ModTime: e.mod, Format: tar.FormatPAX}
		if typ == tar.TypeDir {
			h.Mode, h.Size = 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readTar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

func TestDiffLayers(t *testing.T) {
	dir := t.TempDir()
	t1, t2 := time.Unix(1000, 0), time.Unix(2000, 0)
	prev, cur, out := filepath.Join(dir, "prev"), filepath.Join(dir, "cur"), filepath.Join(dir, "out")
	writeTar(t, prev,
		ent{name: "app/", typ: tar.TypeDir, mod: t1},
		ent{name: "app/.wh..wh..opq", mod: time.Unix(0, 0)},
		ent{name: "app/main.py", body: "v1", mod: t1},
		ent{name: "app/keep.py", body: "same", mod: t1},
		ent{name: "tmp/", typ: tar.TypeDir, mod: t1},
		ent{name: "tmp/scratch/", typ: tar.TypeDir, mod: t1},
		ent{name: "tmp/scratch/a", body: "a", mod: t1},
		ent{name: "etc/", typ: tar.TypeDir, mod: t1},
		ent{name: "etc/.wh.motd", mod: time.Unix(0, 0)},
	)
	writeTar(t, cur,
		ent{name: "app/", typ: tar.TypeDir, mod: t2},
		ent{name: "app/.wh..wh..opq", mod: time.Unix(0, 0)},
		ent{name: "app/main.py", body: "v2", mod: t2},
		ent{name: "app/keep.py", body: "same", mod: t1},
		ent{name: "app/new.py", body: "new", mod: t2},
		ent{name: "tmp/", typ: tar.TypeDir, mod: t2},
		ent{name: "etc/", typ: tar.TypeDir, mod: t1},
		ent{name: "etc/motd", body: "back", mod: t2},
	)
	if err := writeDiff(prev, cur, out); err != nil {
		t.Fatal(err)
	}
	got := readTar(t, out)
	want := map[string]string{
		"app/": "", "app/main.py": "v2", "app/new.py": "new",
		"tmp/": "", "tmp/.wh.scratch": "",
		"etc/": "", "etc/motd": "back",
	}
	for name, body := range want {
		if g, ok := got[name]; !ok || g != body {
			t.Errorf("%s: %q (present %v), want %q", name, g, ok, body)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is in the step's layer, and should not be (all: %v)", name, got)
		}
	}
	// The first step's layer is its whole cumulative one.
	if err := writeDiff("", prev, out); err != nil {
		t.Fatal(err)
	}
	if got := readTar(t, out); len(got) != 9 {
		t.Errorf("first layer: %d entries, want the 9 of its tree: %v", len(got), got)
	}
}
