package wsl

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/lightbearco/tupper/backend"
)

// entry is one tar entry, for building layers and reading tars back.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }

func makeTar(t *testing.T, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: e.uid, Uname: "someone", Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0)}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// readTar returns a tar's entries by name, failing on a malformed tar or
// one whose end comes early.
func readTar(t *testing.T, r io.Reader) (map[string]entry, []string) {
	t.Helper()
	tr := tar.NewReader(r)
	out := map[string]entry{}
	var order []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, order
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s keeps owner names %q/%q: the distribution would map them by its own passwd", hdr.Name, hdr.Uname, hdr.Gname)
		}
		out[hdr.Name] = entry{name: hdr.Name, body: string(body), link: hdr.Linkname, typ: hdr.Typeflag, mode: hdr.Mode, uid: hdr.Uid}
		order = append(order, hdr.Name)
	}
}

func writeLayer(t *testing.T, dir, name string, data []byte) backend.Layer {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return backend.Layer{Blob: backend.Blob{Path: p, Digest: "sha256:" + name}}
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// TestFlattenLayers checks that the layers of an image become the tree
// they mean: higher layers win, whiteouts and opaque directories remove
// what lower layers put there, a file replaces a directory, and what the
// backend adds replaces the image's own.
func TestFlattenLayers(t *testing.T) {
	d := t.TempDir()
	layers := []backend.Layer{
		writeLayer(t, d, "base", gzipped(t, makeTar(t, []entry{
			dir("./"), dir("etc/"), file("etc/hostname", "base"), file("etc/wsl.conf", "[interop]\nenabled=true\n"),
			dir("gone/"), file("gone/a", "a"), dir("opaque/"), file("opaque/old", "old"),
			dir("becomes-file/"), file("becomes-file/inner", "x"), file("bin/kept", "kept"),
			{name: "bin/link", typ: tar.TypeSymlink, link: "kept", mode: 0o777},
			{name: "bin/hard", typ: tar.TypeLink, link: "bin/kept"},
			dir(".tupper/"), dir(".tupper/wsl/"), file(".tupper/wsl/tupper-agent", "an old agent"),
			{name: "usr/bin/passwd", body: "suid", typ: tar.TypeReg, mode: 0o4755, uid: 0},
		}))),
		writeLayer(t, d, "middle", zstded(t, makeTar(t, []entry{
			file("etc/hostname", "middle"), file(".wh.gone", ""), file("opaque/.wh..wh..opq", ""), file("opaque/new", "new"),
			file("becomes-file", "now a file"), {name: "home/user/.profile", body: "p", typ: tar.TypeReg, mode: 0o600, uid: 1000},
		}))),
		writeLayer(t, d, "top", makeTar(t, []entry{file("etc/hostname", "top"), file("bin/.wh.link", "")})),
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	info, err := flattenLayers(tw, layers)
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	got, order := readTar(t, &buf)
	var names []string
	for _, n := range order {
		names = append(names, n)
	}
	want := []string{"./", "etc/", "bin/kept", "bin/hard", "usr/bin/passwd", "opaque/new", "becomes-file", "home/user/.profile", "etc/hostname"}
	for _, n := range want {
		if _, ok := got[n]; !ok {
			t.Errorf("%s missing from the flattened tree %q", n, names)
		}
	}
	for _, n := range []string{"gone/", "gone/a", "opaque/old", "becomes-file/inner", "bin/link", "etc/wsl.conf", ".tupper/wsl/", ".tupper/wsl/tupper-agent", ".wh.gone", "opaque/.wh..wh..opq"} {
		if _, ok := got[n]; ok {
			t.Errorf("%s is in the flattened tree, want it removed", n)
		}
	}
	if got["etc/hostname"].body != "top" {
		t.Errorf("etc/hostname = %q, want the top layer's", got["etc/hostname"].body)
	}
	if got["bin/hard"].link != "bin/kept" {
		t.Errorf("bin/hard links to %q", got["bin/hard"].link)
	}
	if got["usr/bin/passwd"].mode != 0o4755 || got["home/user/.profile"].uid != 1000 {
		t.Errorf("modes and owners not kept: passwd %o, .profile uid %d", got["usr/bin/passwd"].mode, got["home/user/.profile"].uid)
	}
	if names[0] != "./" {
		t.Errorf("the root is not first: %q", names)
	}
	if info.Entries != int64(len(order)) || info.Bytes < 4096*int64(len(order)-3) {
		t.Errorf("info = %+v for %d entries", info, len(order))
	}

	// A layer that would write outside the root is refused.
	bad := writeLayer(t, d, "bad", makeTar(t, []entry{file("../../etc/passwd", "x")}))
	if _, err := flattenLayers(tar.NewWriter(io.Discard), []backend.Layer{bad}); err == nil {
		t.Error("a layer with ../ in a name was flattened")
	}
}

// TestImageTar checks the per-image cache and that the image's tar with
// the backend's entries after it is one valid tar holding both.
func TestImageTar(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"etc", "usr/bin", ".tupper/wsl"} {
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("image\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/wsl.conf"), []byte("[interop]\nenabled=true\n"), 0o644)
	os.WriteFile(filepath.Join(root, ".tupper/wsl/start"), []byte("evil"), 0o755)
	os.Symlink("../etc/hostname", filepath.Join(root, "usr/bin/link"))
	os.Chmod(root, 0o711)
	agent := filepath.Join(t.TempDir(), "tupper-agent")
	os.WriteFile(agent, []byte("\x7fELF agent"), 0o755)

	cache := t.TempDir()
	spec := &backend.Spec{ID: "abc", RootFS: root}
	p1, info, err := imageTar(cache, spec)
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(p1)
	p2, info2, err := imageTar(cache, spec)
	if err != nil || p2 != p1 || info2 != info {
		t.Fatalf("second imageTar = %s, %+v, %v; want the cached %s, %+v", p2, info2, err, p1, info)
	}
	if st2, _ := os.Stat(p2); !os.SameFile(st1, st2) || !st2.ModTime().Equal(st1.ModTime()) {
		t.Error("the cached tar was made again")
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 2 {
		t.Errorf("cache holds %d files, want the tar and its info", len(entries))
	}

	added, err := distroEntries("box-1", agent)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p1)
	defer f.Close()
	got, _ := readTar(t, io.MultiReader(f, bytes.NewReader(added)))
	if got["./"].mode&0o777 != 0o711 {
		t.Errorf("the root's mode is %o, want the image root's 711", got["./"].mode)
	}
	if got["usr/bin/link"].typ != tar.TypeSymlink || got["usr/bin/link"].link != "../etc/hostname" {
		t.Errorf("usr/bin/link = %+v", got["usr/bin/link"])
	}
	if got["etc/hostname"].body != "image\n" {
		t.Errorf("etc/hostname = %q", got["etc/hostname"].body)
	}
	conf := got["etc/wsl.conf"]
	if conf.body != wslConf("box-1") || conf.mode != 0o644 {
		t.Errorf("etc/wsl.conf = %q (mode %o), want the backend's", conf.body, conf.mode)
	}
	for _, want := range []string{"[interop]\nenabled=false\nappendWindowsPath=false\n", "[automount]\nenabled=false\nmountFsTab=false\n",
		"[user]\ndefault=root\n", "[boot]\nsystemd=false\n", "hostname=box-1\n"} {
		if !strings.Contains(conf.body, want) {
			t.Errorf("wsl.conf lacks %q:\n%s", want, conf.body)
		}
	}
	if s := got[".tupper/wsl/start"]; s.body != startScript || s.mode != 0o755 {
		t.Errorf(".tupper/wsl/start = %q (mode %o), want the launcher, not the image's", s.body, s.mode)
	}
	if a := got[".tupper/wsl/tupper-agent"]; a.body != "\x7fELF agent" || a.mode != 0o755 {
		t.Errorf("the agent = %q (mode %o)", a.body, a.mode)
	}

	// Another image gets a tar of its own.
	spec2 := &backend.Spec{ID: "abc", RootFS: root, Image: &backend.Image{ChainID: "sha256:0123abcd"}}
	if k1, k2 := imageKey(spec), imageKey(spec2); k1 == k2 || k2 != "chain-0123abcd" {
		t.Errorf("image keys %q and %q", k1, k2)
	}
}

// TestStartScript runs the launcher under the shells an image may have as
// /bin/sh: it must cap RLIMIT_NPROC in each (dash calls the flag -p, bash
// and busybox -u) and then run the command.
func TestStartScript(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/limits")
	}
	script := filepath.Join(t.TempDir(), "start")
	os.WriteFile(script, []byte(startScript), 0o755)
	shells := map[string][]string{"dash": {"dash"}, "bash": {"bash"}, "busybox": {"busybox", "sh"}}
	ran := 0
	for name, sh := range shells {
		t.Run(name, func(t *testing.T) {
			if _, err := exec.LookPath(sh[0]); err != nil {
				t.Skipf("%s is not installed", sh[0])
			}
			ran++
			args := append(append([]string{sh[0]}, sh[1:]...), script, "77", "cat", "/proc/self/limits")
			if got := maxProcesses(t, args...); got != "77 77" {
				t.Errorf("Max processes after the launcher: %s, want 77 77", got)
			}
			// A lower cap that holds already is kept (and raising it
			// would fail without CAP_SYS_RESOURCE).
			if _, err := exec.LookPath("prlimit"); err == nil {
				if got := maxProcesses(t, append([]string{"prlimit", "--nproc=50:50"}, args...)...); got != "50 50" {
					t.Errorf("Max processes under a cap of 50: %s, want 50 50", got)
				}
			}
		})
	}
	if ran == 0 {
		t.Error("no shell to run the launcher with")
	}
}

// maxProcesses runs argv, which prints /proc/self/limits, and returns the
// soft and hard RLIMIT_NPROC it shows.
func maxProcesses(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v: %s", argv, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "Max" && f[1] == "processes" {
			return f[2] + " " + f[3]
		}
	}
	t.Fatalf("no Max processes in %s", out)
	return ""
}
