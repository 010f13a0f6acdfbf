//go:build linux

package image_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

// savedImage is one image of a hand-made `docker save` archive.
type savedImage struct {
	img  v1.Image
	tags []string
}

// dockerSave writes images the way `docker save` does: a config file, an
// uncompressed layer.tar per layer, and manifest.json listing them.
func dockerSave(t testing.TB, images ...savedImage) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: testTime}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	type manifestEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifest []manifestEntry
	for _, si := range images {
		raw, err := si.img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfgName := strings.TrimPrefix(imageID(t, si.img), "sha256:") + ".json"
		add(cfgName, raw)
		e := manifestEntry{Config: cfgName, RepoTags: si.tags}
		layers, err := si.img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			d, _ := l.DiffID()
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			p := d.Hex + "/layer.tar"
			add(p, data)
			e.Layers = append(e.Layers, p)
		}
		manifest = append(manifest, e)
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	add("manifest.json", mb)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// importImage stores img under name through a `docker save` archive.
func importImage(t testing.TB, s *image.Store, img v1.Image, name string) *image.Image {
	t.Helper()
	imgs, err := s.Import(ctx(t), bytes.NewReader(dockerSave(t, savedImage{img: img, tags: []string{name}})), "", nil)
	if err != nil {
		t.Fatalf("Import %s: %v", name, err)
	}
	if len(imgs) != 1 {
		t.Fatalf("Import %s returned %d images, want 1", name, len(imgs))
	}
	return imgs[0]
}

// ociLayout writes an OCI image layout with fill and returns it as a tar.
func ociLayout(t testing.TB, fill func(layout.Path) error) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(p); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func annotated(names ...string) layout.Option {
	a := map[string]string{}
	for i := 0; i+1 < len(names); i += 2 {
		a[names[i]] = names[i+1]
	}
	return layout.WithAnnotations(a)
}

func TestImport(t *testing.T) {
	testutil.RequiresRoot(t)
	one := imageOf(t, layerTar(t, file("etc/which", "one", 0o644)), layerTar(t, file("etc/more", "more", 0o600)))
	two := imageOf(t, layerTar(t, file("etc/which", "two", 0o644)))
	hostArch := imageFor(t, runtime.GOARCH, layerTar(t, file("etc/which", "host arch", 0o644)))
	otherArch := imageFor(t, "s390x", layerTar(t, file("etc/which", "other arch", 0o644)))
	if runtime.GOARCH == "s390x" {
		otherArch = imageFor(t, "arm64", layerTar(t, file("etc/which", "other arch", 0o644)))
	}

	tests := []struct {
		name      string
		archive   func(t *testing.T) []byte
		as        string
		viaFile   bool
		wantNames [][]string
		wantWhich []string // content of etc/which in each image, in name order
		wantErr   error
	}{
		{
			name: "docker save",
			archive: func(t *testing.T) []byte {
				return dockerSave(t, savedImage{one, []string{"one:1", "docker.io/library/one:latest"}})
			},
			wantNames: [][]string{{"one", "one:1"}},
			wantWhich: []string{"one"},
		},
		{
			name:      "docker save from a file",
			archive:   func(t *testing.T) []byte { return dockerSave(t, savedImage{one, []string{"one:1"}}) },
			viaFile:   true,
			wantNames: [][]string{{"one:1"}},
			wantWhich: []string{"one"},
		},
		{
			name:      "docker save renamed",
			archive:   func(t *testing.T) []byte { return dockerSave(t, savedImage{one, []string{"one:1"}}) },
			as:        "renamed",
			wantNames: [][]string{{"renamed"}},
			wantWhich: []string{"one"},
		},
		{
			name: "docker save of two images",
			archive: func(t *testing.T) []byte {
				return dockerSave(t, savedImage{one, []string{"one:1"}}, savedImage{two, []string{"two:1"}})
			},
			wantNames: [][]string{{"one:1"}, {"two:1"}},
			wantWhich: []string{"one", "two"},
		},
		{
			name: "docker save of two images renamed",
			archive: func(t *testing.T) []byte {
				return dockerSave(t, savedImage{one, []string{"one:1"}}, savedImage{two, []string{"two:1"}})
			},
			as:      "renamed",
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name:    "docker save without a name",
			archive: func(t *testing.T) []byte { return dockerSave(t, savedImage{one, nil}) },
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name: "compressed layers (go-containerregistry tarball)",
			archive: func(t *testing.T) []byte {
				var buf bytes.Buffer
				tag, _ := name.NewTag("gz:1")
				if err := tarball.Write(tag, one, &buf); err != nil {
					t.Fatal(err)
				}
				return buf.Bytes()
			},
			wantNames: [][]string{{"gz:1"}},
			wantWhich: []string{"one"},
		},
		{
			name: "OCI layout named by ref.name",
			archive: func(t *testing.T) []byte {
				return ociLayout(t, func(p layout.Path) error {
					return p.AppendImage(one, annotated("org.opencontainers.image.ref.name", "oci:2"))
				})
			},
			wantNames: [][]string{{"oci:2"}},
			wantWhich: []string{"one"},
		},
		{
			name: "OCI layout named by containerd",
			archive: func(t *testing.T) []byte {
				return ociLayout(t, func(p layout.Path) error {
					return p.AppendImage(two, annotated("io.containerd.image.name", "docker.io/library/ctr:3", "org.opencontainers.image.ref.name", "3"))
				})
			},
			wantNames: [][]string{{"ctr:3"}},
			wantWhich: []string{"two"},
		},
		{
			name: "OCI layout with a multi-platform index",
			archive: func(t *testing.T) []byte {
				idx := mutate.AppendManifests(empty.Index,
					mutate.IndexAddendum{Add: otherArch, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: platformOf(t, otherArch)}}},
					mutate.IndexAddendum{Add: hostArch, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
				)
				return ociLayout(t, func(p layout.Path) error {
					return p.AppendIndex(idx, annotated("org.opencontainers.image.ref.name", "multi:1"))
				})
			},
			wantNames: [][]string{{"multi:1"}},
			wantWhich: []string{"host arch"},
		},
		{
			name: "OCI layout unnamed, named on import",
			archive: func(t *testing.T) []byte {
				return ociLayout(t, func(p layout.Path) error { return p.AppendImage(one) })
			},
			as:        "given",
			wantNames: [][]string{{"given"}},
			wantWhich: []string{"one"},
		},
		{
			name: "OCI layout unnamed",
			archive: func(t *testing.T) []byte {
				return ociLayout(t, func(p layout.Path) error { return p.AppendImage(one) })
			},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name:    "not an image archive",
			archive: func(t *testing.T) []byte { return layerTar(t, file("hello.txt", "hi", 0o644)) },
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name:    "not a tar",
			archive: func(t *testing.T) []byte { return bytes.Repeat([]byte("not a tar archive "), 100) },
			wantErr: errdefs.ErrInvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			data := tt.archive(t)
			var imgs []*image.Image
			var err error
			if tt.viaFile {
				p := filepath.Join(t.TempDir(), "archive.tar")
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
				imgs, err = s.ImportFile(ctx(t), p, tt.as, nil)
			} else {
				imgs, err = s.Import(ctx(t), bytes.NewReader(data), tt.as, nil)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Import = %v, want an error of class %v", err, tt.wantErr)
				}
				if list, _ := s.List(ctx(t)); len(list) != 0 {
					t.Errorf("a failed import left images: %v", list)
				}
				return
			}
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			sort.Slice(imgs, func(i, j int) bool { return imgs[i].Names[0] < imgs[j].Names[0] })
			var names [][]string
			var which []string
			for _, img := range imgs {
				names = append(names, img.Names)
				b, err := os.ReadFile(filepath.Join(img.RootFS, "etc/which"))
				if err != nil {
					t.Fatal(err)
				}
				which = append(which, string(b))
				if got, err := s.Resolve(ctx(t), img.Names[0]); err != nil || got.ID != img.ID {
					t.Errorf("Resolve(%q) = %v, %v; want image %s", img.Names[0], got, err, img.ID)
				}
			}
			if diff := cmp.Diff(tt.wantNames, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWhich, which); diff != "" {
				t.Errorf("etc/which (-want +got):\n%s", diff)
			}
		})
	}
}

func platformOf(t testing.TB, img v1.Image) string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Architecture
}

// TestImportMatchesPull checks that the same image gives the same tree and
// id whether it comes from a registry or an archive.
func TestImportMatchesPull(t *testing.T) {
	testutil.RequiresRoot(t)
	layers, want := richLayers(t)
	img := imageOf(t, layers...)
	s := newStore(t)
	got := importImage(t, s, img, "rich")
	if got.ID != imageID(t, img) {
		t.Errorf("ID = %s, want the config digest %s", got.ID, imageID(t, img))
	}
	if diff := cmp.Diff(want, snapshot(t, got.RootFS)); diff != "" {
		t.Errorf("imported tree (-want +got):\n%s", diff)
	}
}
