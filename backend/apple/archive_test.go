package apple

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/lightbearco/tupper/backend"
)

// readLayout unpacks the archive at p and opens it as an OCI image layout
// with go-containerregistry, checking the whole of it (every blob's digest
// and size, every layer's diff ID) with its validate package. It returns
// the index's one manifest descriptor and its image.
func readLayout(t *testing.T, p string) (v1.Descriptor, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("the archive holds %s of type %q: a layout holds files and directories", h.Name, h.Typeflag)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	// validate reads layers as gzip streams only; Fast skips their
	// bytes, which checkLayers then checks.
	if err := validate.Index(ii, validate.Fast); err != nil {
		t.Fatalf("invalid OCI image layout: %v", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	img, err := ii.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkLayers(t, img)
	return im.Manifests[0], img
}

// checkLayers checks each layer's bytes against its digest and size, and
// its uncompressed bytes against the config's diff ID.
func checkLayers(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("the config lists %d diff IDs for %d layers", len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	for i, d := range m.Layers {
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, n, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || got != d.Digest || n != d.Size {
			t.Errorf("layer %d: %d bytes with digest %s (%v); the manifest says %d, %s", i, n, got, err, d.Size, d.Digest)
		}
		rc, err = l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		diff, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || diff != cf.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: uncompressed digest %s (%v); the config's diff ID is %s", i, diff, err, cf.RootFS.DiffIDs[i])
		}
	}
}

func checkNamed(t *testing.T, d v1.Descriptor, ref string) {
	t.Helper()
	for _, k := range nameAnnotations {
		if d.Annotations[k] != ref {
			t.Errorf("annotation %s = %q, want %q", k, d.Annotations[k], ref)
		}
	}
}

func TestRootFSArchiveIsOCILayout(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(root, 0o750))
	must(os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755))
	must(os.Mkdir(filepath.Join(root, "root"), 0o700))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	must(os.WriteFile(filepath.Join(root, "usr", "bin", "tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "root", "secret"), []byte("s3cret"), 0o600))
	must(os.Link(filepath.Join(root, "usr", "bin", "tool"), filepath.Join(root, "usr", "bin", "tool2")))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	old := time.Date(2020, 2, 2, 2, 2, 2, 0, time.UTC)
	must(os.Chtimes(filepath.Join(root, "root", "secret"), old, old))

	ref := "tupper.local/rootfs:0123456789abcdef"
	p := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(p)
	must(err)
	tmp := t.TempDir()
	must(writeRootFSArchive(f, root, "arm64", ref, tmp))
	must(f.Close())
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the layer's temporary file stayed: %v", left)
	}

	desc, img := readLayout(t, p)
	checkNamed(t, desc, ref)
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != "arm64" {
		t.Errorf("index platform = %+v, want linux/arm64", desc.Platform)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q", desc.MediaType)
	}
	cf, err := img.ConfigFile()
	must(err)
	if cf.OS != "linux" || cf.Architecture != "arm64" || cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("config = %+v", cf)
	}
	layers, err := img.Layers()
	must(err)
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCIUncompressedLayer {
		t.Errorf("layer media type %q", mt)
	}

	rc, err := layers[0].Uncompressed()
	must(err)
	defer rc.Close()
	type entry struct {
		Type     byte
		Mode     int64
		Link     string
		Content  string
		Modified time.Time
	}
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		b, err := io.ReadAll(tr)
		must(err)
		e := entry{Type: h.Typeflag, Mode: h.Mode, Link: h.Linkname, Content: string(b)}
		if h.Name == "root/secret" {
			e.Modified = h.ModTime.UTC()
		}
		got[h.Name] = e
	}
	want := map[string]entry{
		"./":            {Type: tar.TypeDir, Mode: 0o750},
		"bin":           {Type: tar.TypeSymlink, Mode: 0o777, Link: "usr/bin"},
		"root/":         {Type: tar.TypeDir, Mode: 0o700},
		"root/secret":   {Type: tar.TypeReg, Mode: 0o600, Content: "s3cret", Modified: old},
		"tmp/":          {Type: tar.TypeDir, Mode: 0o1777},
		"usr/":          {Type: tar.TypeDir, Mode: 0o755},
		"usr/bin/":      {Type: tar.TypeDir, Mode: 0o755},
		"usr/bin/tool":  {Type: tar.TypeReg, Mode: 0o755, Content: "#!/bin/sh\necho hi\n"},
		"usr/bin/tool2": {Type: tar.TypeLink, Mode: 0o755, Link: "usr/bin/tool"},
	}
	if runtime.GOOS == "windows" {
		t.Skip("the layer's modes and links are those of a Unix tree")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

// storeImage writes img's blobs to files, as the image store keeps them,
// and describes them as a backend.Image.
func storeImage(t *testing.T, img v1.Image, names ...string) *backend.Image {
	t.Helper()
	dir := t.TempDir()
	write := func(b []byte, mt types.MediaType, d v1.Hash) backend.Blob {
		p := filepath.Join(dir, d.Hex)
		if err := os.WriteFile(p, b, 0o444); err != nil {
			t.Fatal(err)
		}
		return backend.Blob{Digest: d.String(), MediaType: string(mt), Size: int64(len(b)), Path: p}
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	md, _ := img.Digest()
	mt, _ := img.MediaType()
	cfg, _ := img.RawConfigFile()
	cd, _ := img.ConfigName()
	out := &backend.Image{ID: cd.String(), Names: names, Manifest: write(raw, mt, md), Config: write(cfg, types.OCIConfigJSON, cd)}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := l.Digest()
		diff, _ := l.DiffID()
		lmt, _ := l.MediaType()
		out.Layers = append(out.Layers, backend.Layer{Blob: write(b, lmt, d), DiffID: diff.String()})
	}
	return out
}

func TestImageArchiveIsOCILayout(t *testing.T) {
	src, err := random.Image(2048, 3)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := src.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "arm64"
	if src, err = mutate.ConfigFile(src, cf); err != nil {
		t.Fatal(err)
	}
	bi := storeImage(t, src, "docker.io/library/python:3.12-slim")
	ref, err := imageRef(&backend.Spec{Image: bi})
	if err != nil {
		t.Fatal(err)
	}
	if want := "tupper.local/python:" + strings.TrimPrefix(bi.ID, "sha256:")[:16]; ref != want {
		t.Errorf("imageRef = %q, want %q", ref, want)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeImageArchive(f, bi, ref); err != nil {
		t.Fatal(err)
	}
	f.Close()

	desc, img := readLayout(t, p)
	checkNamed(t, desc, ref)
	want, _ := src.Digest()
	if desc.Digest != want {
		t.Errorf("the archive's manifest is %s, the image's %s", desc.Digest, want)
	}
	if got, _ := img.Digest(); got != want {
		t.Errorf("the archive's image is %s, want %s", got, want)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != "arm64" {
		t.Errorf("index platform %+v, want the config's, linux/arm64", desc.Platform)
	}
}

func TestImageArchiveRefusesDamagedBlobs(t *testing.T) {
	src, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		damage func(*backend.Image)
		want   string
	}{
		{name: "a layer's bytes", want: "damaged", damage: func(bi *backend.Image) {
			b, _ := os.ReadFile(bi.Layers[0].Path)
			b[len(b)/2] ^= 0xff
			os.Chmod(bi.Layers[0].Path, 0o644)
			os.WriteFile(bi.Layers[0].Path, b, 0o644)
		}},
		{name: "a layer's size", want: "bytes, and the image says", damage: func(bi *backend.Image) {
			os.Chmod(bi.Layers[0].Path, 0o644)
			f, _ := os.OpenFile(bi.Layers[0].Path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("x"))
			f.Close()
		}},
		{name: "the config", want: "damaged", damage: func(bi *backend.Image) {
			os.Chmod(bi.Config.Path, 0o644)
			os.WriteFile(bi.Config.Path, []byte("{}"), 0o644)
		}},
		{name: "a layer missing", want: "which the image does not hold", damage: func(bi *backend.Image) { bi.Layers = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bi := storeImage(t, src)
			tt.damage(bi)
			err := writeImageArchive(io.Discard, bi, "tupper.local/x:0123456789abcdef")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("writeImageArchive = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestImageRef(t *testing.T) {
	tests := []struct{ name, want string }{
		{"base", "base"},
		{"docker.io/library/python:3.12-slim", "python"},
		{"ghcr.io/Org/My_Image:v1@sha256:abcd", "my-image"},
		{"code-interpreter", "code-interpreter"},
		{"___", "image"},
	}
	for _, tt := range tests {
		if got := repoPart(tt.name); got != tt.want {
			t.Errorf("repoPart(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if _, err := imageRef(&backend.Spec{Image: &backend.Image{ID: "nodigest"}}); err == nil {
		t.Error("imageRef of an image without a digest succeeded")
	}
	root := t.TempDir()
	a, err := imageRef(&backend.Spec{RootFS: root})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := imageRef(&backend.Spec{RootFS: root + "/."})
	if a != b || !strings.HasPrefix(a, "tupper.local/rootfs:") {
		t.Errorf("imageRef of one root = %q and %q", a, b)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(root, later, later)
	if c, _ := imageRef(&backend.Spec{RootFS: root}); c == a {
		t.Error("a root that changed keeps its image name")
	}
}
