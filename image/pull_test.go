//go:build linux

package image_test

import (
	"archive/tar"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

// richLayers returns three layers that exercise the unpacker, and the tree
// they make together. bin/tool holds random bytes.
func richLayers(t testing.TB) ([][]byte, map[string]node) {
	t.Helper()
	random := make([]byte, 200<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	tool := string(random)
	l1 := layerTar(t,
		dir("bin", 0o755),
		file("bin/tool", tool, 0o755),
		file("bin/su", "su", 0o4755),
		owned(file("bin/sg", "sg", 0o2755), 0, 42),
		symlink("bin/sh", "tool"),
		dir("dev", 0o755),
		entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666}, // a character device: skipped
		dir("etc/", 0o755),
		file("etc/hosts", "127.0.0.1 localhost\n", 0o644),
		entry{name: "etc/xattrs", typ: tar.TypeReg, mode: 0o644, body: "x", xattr: map[string]string{
			"user.note":              "kept",
			"trusted.overlay.opaque": "y", // steers overlayfs: dropped
		}},
		dir("usr", 0o755),
		dir("usr/lib", 0o755),
		file("usr/lib/libx.so", "x", 0o644),
		symlink("lib", "/usr/lib"),
		dir("run", 0o755),
		entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		dir("var", 0o755),
		symlink("var/run", "/run"),
		owned(dir("home/user", 0o750), 1000, 1000),
		owned(file("home/user/.bashrc", "PS1='$ '\n", 0o644), 1000, 1000),
		dir("opt/app", 0o755),
		file("opt/app/a", "a", 0o644),
		file("opt/app/sub/c", "c", 0o644), // opt/app/sub comes implicitly
		file("implicit/deep/file", "deep", 0o640),
		dir("data", 0o755),
		file("data/keep", "keep", 0o644),
		file("data/gone", "gone", 0o644),
		file("old-file", "old", 0o644),
		dir("replace-me", 0o755),
		file("replace-me/x", "x", 0o644),
		dir("tmp", 0o1777),
	)
	l2 := layerTar(t,
		file("data/.wh.gone", "", 0o644),
		dir("opt/app", 0o755),
		file("opt/app/sub/early", "early", 0o644), // before the marker, still this layer's
		file("opt/app/.wh..wh..opq", "", 0o644),
		file("opt/app/new", "new", 0o644),
		hardlink("bin/tool-link", "bin/tool"),
		file("var/run/app.pid", "42\n", 0o644), // through var/run -> /run
		file("lib/liby.so", "y", 0o644),        // through lib -> /usr/lib
		file(".wh.old-file", "", 0o644),
		file("etc/hosts", "10.0.0.1 db\n", 0o600),
		file("./dotted/name", "dot", 0o644),
	)
	l3 := layerTar(t,
		file("home/user/.wh..bashrc", "", 0o644),
		file("bin/.wh.sg", "", 0o644),
		file("data/gone", "back\n", 0o644),
		file("replace-me", "now a file", 0o644),
	)

	d := func(mode string) node { return node{Type: typeDir, Mode: mode} }
	f := func(mode, content string) node {
		return node{Type: typeFile, Mode: mode, Content: content, Links: 1, MTime: testTime.Unix()}
	}
	l := func(target string) node { return node{Type: typeSymlink, Link: target, MTime: testTime.Unix()} }
	toolNode := f("0755", contentOf(tool))
	toolNode.Links = 2
	want := map[string]node{
		"bin":                {Type: typeDir, Mode: "0755"},
		"bin/tool":           toolNode,
		"bin/tool-link":      toolNode,
		"bin/su":             f("4755", "su"),
		"bin/sh":             l("tool"),
		"dev":                d("0755"),
		"etc":                d("0755"),
		"etc/hosts":          f("0600", "10.0.0.1 db\n"),
		"etc/xattrs":         f("0644", "x"),
		"usr":                d("0755"),
		"usr/lib":            d("0755"),
		"usr/lib/libx.so":    f("0644", "x"),
		"usr/lib/liby.so":    f("0644", "y"),
		"lib":                l("/usr/lib"),
		"run":                d("0755"),
		"run/fifo":           {Type: typeFifo, Mode: "0600", MTime: testTime.Unix()},
		"run/app.pid":        f("0644", "42\n"),
		"var":                d("0755"),
		"var/run":            l("/run"),
		"home":               d("0755"),
		"home/user":          {Type: typeDir, Mode: "0750", UID: 1000, GID: 1000},
		"opt":                d("0755"),
		"opt/app":            d("0755"),
		"opt/app/new":        f("0644", "new"),
		"opt/app/sub":        d("0755"),
		"opt/app/sub/early":  f("0644", "early"),
		"implicit":           d("0755"),
		"implicit/deep":      d("0755"),
		"implicit/deep/file": f("0640", "deep"),
		"data":               d("0755"),
		"data/keep":          f("0644", "keep"),
		"data/gone":          f("0644", "back\n"),
		"dotted":             d("0755"),
		"dotted/name":        f("0644", "dot"),
		"replace-me":         f("0644", "now a file"),
		"tmp":                d("1777"),
	}
	return [][]byte{l1, l2, l3}, want
}

func TestPullUnpacksExactly(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := startRegistry(t)
	layers, want := richLayers(t)
	img := imageOf(t, layers...)
	push(t, img, reg+"/test/rich:v1")

	s := newStore(t)
	rec := &recorder{}
	got, err := s.Pull(ctx(t), reg+"/test/rich:v1", image.PullOptions{Insecure: true}, rec)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if diff := cmp.Diff(want, snapshot(t, got.RootFS)); diff != "" {
		t.Errorf("unpacked tree (-want +got):\n%s", diff)
	}

	root := got.RootFS
	if !sameFile(t, filepath.Join(root, "bin/tool"), filepath.Join(root, "bin/tool-link")) {
		t.Errorf("bin/tool-link is not a hard link of bin/tool")
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(root, "etc/xattrs"), "user.note", buf)
	if err != nil || string(buf[:n]) != "kept" {
		t.Errorf("user.note xattr = %q, %v; want %q", buf[:max(n, 0)], err, "kept")
	}
	if _, err := unix.Lgetxattr(filepath.Join(root, "etc/xattrs"), "trusted.overlay.opaque", buf); err == nil {
		t.Errorf("trusted.overlay.opaque xattr was applied; want it dropped")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "bin/su"), &st); err != nil || st.Mode&syscall.S_ISUID == 0 {
		t.Errorf("bin/su lost its set-user-ID bit (mode %o, %v)", st.Mode, err)
	}
	if err := syscall.Stat(root, &st); err != nil || st.Mode&0o7777 != 0o755 {
		t.Errorf("root filesystem mode %o (%v), want 755", st.Mode&0o7777, err)
	}

	wantImg := &image.Image{
		ID:     imageID(t, img),
		Names:  []string{reg + "/test/rich:v1"},
		RootFS: got.RootFS,
		Config: image.ImageConfig{
			Env:        testConfig.Env,
			Entrypoint: testConfig.Entrypoint,
			Cmd:        testConfig.Cmd,
			WorkingDir: testConfig.WorkingDir,
			User:       testConfig.User,
		},
		Size:    got.Size,
		Created: testTime,
	}
	// The blobs are TestResolveGivesTheBlobs's to check.
	if diff := cmp.Diff(wantImg, got, cmpopts.IgnoreFields(image.Image{}, "ChainID", "Manifest", "ConfigBlob", "Layers")); diff != "" {
		t.Errorf("Pull returned (-want +got):\n%s", diff)
	}
	if len(got.Layers) != 3 {
		t.Errorf("Pull returned %d layer blobs, want the image's 3", len(got.Layers))
	}
	if !filepath.IsAbs(got.RootFS) || !strings.HasPrefix(got.RootFS, s.Root()) {
		t.Errorf("RootFS %q is not an absolute path in the store %q", got.RootFS, s.Root())
	}
	if got.Size < int64(200<<10) {
		t.Errorf("Size = %d, want at least the 200 KiB of bin/tool", got.Size)
	}

	// Progress: every layer's bytes, counted to the end.
	ls, _ := img.Layers()
	for _, l := range ls {
		d, _ := l.Digest()
		size, _ := l.Size()
		if n := rec.count(image.PhaseDownload, func(e image.Event) bool {
			return e.Item == d.String() && transferred(e) && e.Current == size && e.Total == size
		}); n != 1 {
			t.Errorf("layer %s: %d final download events with %d bytes, want 1", d, n, size)
		}
		if n := rec.count(image.PhaseUnpack, func(e image.Event) bool { return e.Item == d.String() && e.Done }); n != 1 {
			t.Errorf("layer %s: %d unpack done events, want 1", d, n)
		}
	}
}

func sameFile(t testing.TB, a, b string) bool {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
}

func TestPullTwiceUnpacksOnce(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := startRegistry(t)
	layers, _ := richLayers(t)
	push(t, imageOf(t, layers...), reg+"/test/twice:1")
	s := newStore(t)

	first, err := s.Pull(ctx(t), reg+"/test/twice:1", image.PullOptions{Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := statTimes(t, first.RootFS)
	rec := &recorder{}
	second, err := s.Pull(ctx(t), reg+"/test/twice:1", image.PullOptions{Insecure: true}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("second pull returned another image (-first +second):\n%s", diff)
	}
	if n := rec.count(image.PhaseDownload, transferred); n != 0 {
		t.Errorf("second pull downloaded %d layers, want 0", n)
	}
	if n := rec.count(image.PhaseUnpack, func(e image.Event) bool { return e.Total > 0 }); n != 0 {
		t.Errorf("second pull unpacked (%d byte events), want no unpacking", n)
	}
	if diff := cmp.Diff(before, statTimes(t, second.RootFS)); diff != "" {
		t.Errorf("second pull touched the root filesystem (-before +after):\n%s", diff)
	}
	if n := dirCount(t, filepath.Join(s.Root(), "unpacked")); n != 1 {
		t.Errorf("%d unpacked root filesystems, want 1", n)
	}
}

func TestPullSharedLayerStoredOnce(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := startRegistry(t)
	base := layerTar(t, file("shared", "base layer", 0o644))
	a := imageOf(t, base, layerTar(t, file("a", "a", 0o644)))
	b := imageOf(t, base, layerTar(t, file("b", "b", 0o644)))
	push(t, a, reg+"/test/a:1")
	push(t, b, reg+"/test/b:1")
	s := newStore(t)

	if _, err := s.Pull(ctx(t), reg+"/test/a:1", image.PullOptions{Insecure: true}, nil); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if _, err := s.Pull(ctx(t), reg+"/test/b:1", image.PullOptions{Insecure: true}, rec); err != nil {
		t.Fatal(err)
	}
	ls, _ := b.Layers()
	shared, _ := ls[0].Digest()
	if n := rec.count(image.PhaseDownload, func(e image.Event) bool { return e.Item == shared.String() && transferred(e) }); n != 0 {
		t.Errorf("shared layer downloaded again")
	}
	if n := rec.count(image.PhaseDownload, func(e image.Event) bool { return e.Item == shared.String() && e.Message == "already present" }); n != 1 {
		t.Errorf("shared layer not reported as already present")
	}
	// Three distinct layers, and a config and a manifest per image.
	if n := blobCount(t, s.Root()); n != 3+2+2 {
		t.Errorf("%d blobs in the store, want 7", n)
	}
}

func TestPullConcurrentSameRef(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := startRegistry(t)
	layers, want := richLayers(t)
	push(t, imageOf(t, layers...), reg+"/test/race:1")
	s := newStore(t)
	// A second Store on the same root stands for another process.
	other := openStore(t, s.Root())

	rec := &recorder{}
	var wg sync.WaitGroup
	imgs := make([]*image.Image, 4)
	errs := make([]error, 4)
	for i := range imgs {
		st := s
		if i%2 == 1 {
			st = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgs[i], errs[i] = st.Pull(ctx(t), reg+"/test/race:1", image.PullOptions{Insecure: true}, rec)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if diff := cmp.Diff(imgs[0], imgs[i]); diff != "" {
			t.Errorf("pull %d returned another image (-0 +%d):\n%s", i, i, diff)
		}
	}
	if n := rec.count(image.PhaseDownload, transferred); n != len(layers) {
		t.Errorf("%d layer downloads in all, want %d (each layer once)", n, len(layers))
	}
	if n := rec.count(image.PhaseUnpack, func(e image.Event) bool { return e.Done }); n != len(layers) {
		t.Errorf("%d layers unpacked in all, want %d (one unpack)", n, len(layers))
	}
	if diff := cmp.Diff(want, snapshot(t, imgs[0].RootFS)); diff != "" {
		t.Errorf("unpacked tree (-want +got):\n%s", diff)
	}
	if n := dirCount(t, filepath.Join(s.Root(), "tmp")); n != 0 {
		t.Errorf("%d leftovers in tmp/", n)
	}
}

func TestPullErrors(t *testing.T) {
	reg := startRegistry(t)
	push(t, imageOf(t, layerTar(t, file("f", "f", 0o644))), reg+"/test/exists:1")
	s := newStore(t)
	tests := []struct {
		name  string
		ref   string
		opts  image.PullOptions
		class error
	}{
		{name: "unknown tag", ref: reg + "/test/exists:2", opts: image.PullOptions{Insecure: true}, class: errdefs.ErrNotFound},
		{name: "unknown repository", ref: reg + "/test/nope:1", opts: image.PullOptions{Insecure: true}, class: errdefs.ErrNotFound},
		{name: "bad reference", ref: "UPPER/case", class: errdefs.ErrInvalidArgument},
		{name: "bad platform", ref: reg + "/test/exists:1", opts: image.PullOptions{Insecure: true, Platform: "linux"}, class: errdefs.ErrInvalidArgument},
		{name: "nothing listening", ref: "127.0.0.1:1/test/x:1", opts: image.PullOptions{Insecure: true}, class: errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Pull(ctx(t), tt.ref, tt.opts, nil)
			if !errors.Is(err, tt.class) {
				t.Fatalf("Pull(%q) = %v, want an error of class %v", tt.ref, err, tt.class)
			}
			if !strings.Contains(err.Error(), tt.ref) && tt.class != errdefs.ErrInvalidArgument {
				t.Errorf("error %q does not name the reference", err)
			}
		})
	}
}
