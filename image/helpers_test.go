//go:build linux

package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/image"
)

// testTime is the modification time of every entry the tests put in layers.
var testTime = time.Date(2024, 3, 1, 12, 30, 45, 0, time.UTC)

// entry is one tar entry of a test layer.
type entry struct {
	name  string
	typ   byte
	mode  int64
	uid   int
	gid   int
	body  string
	link  string
	xattr map[string]string
}

func file(name, body string, mode int64) entry {
	return entry{name: name, typ: tar.TypeReg, mode: mode, body: body}
}

func dir(name string, mode int64) entry { return entry{name: name, typ: tar.TypeDir, mode: mode} }

func symlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}
}

func hardlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeLink, mode: 0o644, link: target}
}

func owned(e entry, uid, gid int) entry {
	e.uid, e.gid = uid, gid
	return e
}

// layerTar makes an uncompressed layer from entries, in order.
func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:     e.name,
			Typeflag: e.typ,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			Linkname: e.link,
			ModTime:  testTime,
			Format:   tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if len(e.xattr) > 0 {
			hdr.PAXRecords = map[string]string{}
			for k, v := range e.xattr {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipLayer wraps an uncompressed layer tar as a gzip-compressed v1.Layer.
func gzipLayer(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testConfig is the run config of the test images.
var testConfig = v1.Config{
	Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hello"},
	Entrypoint: []string{"/bin/sh", "-c"},
	Cmd:        []string{"echo hi"},
	WorkingDir: "/home/user",
	User:       "user",
}

// imageOf makes an image of layer tars (bottom first) with testConfig.
func imageOf(t testing.TB, layers ...[]byte) v1.Image {
	t.Helper()
	return imageFor(t, runtime.GOARCH, layers...)
}

func imageFor(t testing.TB, arch string, layers ...[]byte) v1.Image {
	t.Helper()
	ls := make([]v1.Layer, len(layers))
	for i, b := range layers {
		ls[i] = gzipLayer(t, b)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = testConfig
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: testTime}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func imageID(t testing.TB, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func newStore(t testing.TB) *image.Store {
	t.Helper()
	return openStore(t, t.TempDir())
}

func openStore(t testing.TB, root string) *image.Store {
	t.Helper()
	s, err := image.Open(image.Config{Root: root, Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tWriter sends log lines to t.Log, shown for failed tests and with -v.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// startRegistry runs an in-process registry on loopback and returns its
// host:port.
func startRegistry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func push(t testing.TB, img v1.Image, ref string) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// recorder is a Progress that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []image.Event
}

func (r *recorder) Event(e image.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// list returns the events so far.
func (r *recorder) list() []image.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// count returns how many events of phase match.
func (r *recorder) count(phase image.Phase, match func(image.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Phase == phase && match(e) {
			n++
		}
	}
	return n
}

// transferred matches the last event of an item that was really copied.
func transferred(e image.Event) bool { return e.Done && e.Message == "" }

// node describes one entry of an unpacked tree.
type node struct {
	Type    string
	Mode    string // permission and set-id bits, octal
	UID     int
	GID     int
	Content string // small contents verbatim, bigger ones as a sha256
	Link    string
	Links   int
	MTime   int64 // seconds; not kept for directories, whose times later layers change
}

const (
	typeFile    = "file"
	typeDir     = "dir"
	typeSymlink = "symlink"
	typeFifo    = "fifo"
)

// snapshot describes every entry under root.
func snapshot(t testing.TB, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		n := node{
			Mode:  octal(st.Mode & 0o7777),
			UID:   int(st.Uid),
			GID:   int(st.Gid),
			MTime: st.Mtim.Sec,
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			n.Type = typeFile
			n.Links = int(st.Nlink)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.Content = contentOf(string(b))
		case syscall.S_IFDIR:
			n.Type = typeDir
			n.MTime = 0
		case syscall.S_IFLNK:
			n.Type = typeSymlink
			n.Mode = ""
			if n.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFIFO:
			n.Type = typeFifo
		default:
			n.Type = "other"
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return out
}

func contentOf(s string) string {
	if len(s) <= 64 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func octal(m uint32) string {
	const digits = "01234567"
	b := []byte{'0', '0', '0', '0'}
	for i := 3; i >= 0; i-- {
		b[i] = digits[m&7]
		m >>= 3
	}
	return string(b)
}

// statTimes records the change time of everything under root: any write to
// the tree, of data or metadata, changes one.
func statTimes(t testing.TB, root string) map[string]unix.Timespec {
	t.Helper()
	out := map[string]unix.Timespec{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		out[p] = st.Ctim
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// blobCount returns the number of blobs in the store at root.
func blobCount(t testing.TB, root string) int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(root, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func dirCount(t testing.TB, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
