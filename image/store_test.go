//go:build linux

package image_test

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

func TestConfigValidate(t *testing.T) {
	if err := (image.Config{}).Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Validate of an empty config = %v, want ErrInvalidArgument", err)
	}
	if _, err := image.Open(image.Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Open of an empty config = %v, want ErrInvalidArgument", err)
	}
	root := filepath.Join(t.TempDir(), "a", "b")
	s, err := image.Open(image.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(s.Root())
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("store root mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
}

func TestNormalizeName(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "short", in: "base", want: "base"},
		{name: "latest is implied", in: "base:latest", want: "base"},
		{name: "docker hub long form", in: "docker.io/library/alpine:3", want: "alpine:3"},
		{name: "docker hub index form", in: "index.docker.io/library/alpine:3", want: "alpine:3"},
		{name: "docker hub user", in: "docker.io/someone/tool:1", want: "someone/tool:1"},
		{name: "other registry", in: "localhost:5000/x:y", want: "localhost:5000/x:y"},
		{name: "other registry latest", in: "ghcr.io/a/b:latest", want: "ghcr.io/a/b"},
		{name: "digest", in: "alpine@sha256:" + strings.Repeat("a", 64), want: "alpine@sha256:" + strings.Repeat("a", 64)},
		{name: "empty", in: "", wantErr: true},
		{name: "upper case", in: "Base", wantErr: true},
		{name: "id prefix", in: "sha256:abc", wantErr: true},
		{name: "space", in: "my image", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := image.NormalizeName(tt.in)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("NormalizeName(%q) = %q, %v; want ErrInvalidArgument", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeName(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	img := imageOf(t, layerTar(t, file("f", "f", 0o644)))
	stored := importImage(t, s, img, "docker.io/library/thing:1")
	if diff := cmp.Diff([]string{"thing:1"}, stored.Names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	id := imageID(t, img)
	for _, q := range []string{"thing:1", "docker.io/library/thing:1", "index.docker.io/library/thing:1", id, id[:len("sha256:")+12], strings.TrimPrefix(id, "sha256:")[:12]} {
		t.Run(q, func(t *testing.T) {
			got, err := s.Resolve(ctx(t), q)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", q, err)
			}
			if diff := cmp.Diff(stored, got); diff != "" {
				t.Errorf("Resolve(%q) (-want +got):\n%s", q, diff)
			}
		})
	}
	for _, q := range []string{"thing:2", "nothing", "sha256:ffff", strings.Repeat("f", 12)} {
		t.Run("unknown "+q, func(t *testing.T) {
			_, err := s.Resolve(ctx(t), q)
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("Resolve(%q) = %v, want ErrNotFound", q, err)
			}
			if !strings.Contains(err.Error(), "tupper image pull") || !strings.Contains(err.Error(), q) {
				t.Errorf("error %q should name the image and say how to get it", err)
			}
		})
	}
	// Templates Tupper can build say how to build them.
	for q, recipe := range map[string]string{"base": "base", "code-interpreter": "code-interpreter", "code-interpreter-v1": "code-interpreter"} {
		t.Run("unbuilt "+q, func(t *testing.T) {
			_, err := s.Resolve(ctx(t), q)
			if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "tupper image build "+recipe+"`") {
				t.Fatalf("Resolve(%q) = %v, want not found saying `tupper image build %s`", q, err, recipe)
			}
		})
	}
}

func TestResolveNeverWrites(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	layers, _ := richLayers(t)
	stored := importImage(t, s, imageOf(t, layers...), "rich")
	before := statTimes(t, s.Root())
	for range 3 {
		if _, err := s.Resolve(ctx(t), "rich"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(before, statTimes(t, s.Root())); diff != "" {
		t.Errorf("Resolve and List changed the store (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(stored.RootFS); err != nil {
		t.Fatal(err)
	}
}

func TestListTagRemoveCollectsGarbage(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	base := layerTar(t, file("shared", "base", 0o644))
	a := importImage(t, s, imageOf(t, base, layerTar(t, file("a", "a", 0o644))), "a")
	b := importImage(t, s, imageOf(t, base, layerTar(t, file("b", "b", 0o644))), "b")
	if err := s.Tag(ctx(t), "a", "a-alias:1"); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, img := range list {
		got = append(got, img.Names)
	}
	if diff := cmp.Diff([][]string{{"a", "a-alias:1"}, {"b"}}, got); diff != "" {
		t.Errorf("List names (-want +got):\n%s", diff)
	}
	// 3 layers (1 shared), a config and a manifest for each image.
	if n := blobCount(t, s.Root()); n != 7 {
		t.Fatalf("%d blobs, want 7", n)
	}

	// Removing one of two names keeps the image.
	if err := s.Remove(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx(t), "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Resolve(a) after Remove = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(a.RootFS); err != nil {
		t.Errorf("image a lost its root filesystem while it still has a name: %v", err)
	}
	// Removing the last name collects what only a used.
	if err := s.Remove(ctx(t), "a-alias:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(a.RootFS); !os.IsNotExist(err) {
		t.Errorf("root filesystem of a still there: %v", err)
	}
	if n := blobCount(t, s.Root()); n != 4 {
		t.Errorf("%d blobs after removing a, want 4 (shared layer, b's layer, config, manifest)", n)
	}
	if got, err := s.Resolve(ctx(t), "b"); err != nil {
		t.Errorf("b is gone with a: %v", err)
	} else if diff := cmp.Diff(b, got); diff != "" {
		t.Errorf("b changed (-want +got):\n%s", diff)
	}
	if err := s.Remove(ctx(t), "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove(a) = %v, want ErrNotFound", err)
	}

	// Removing by id drops every name.
	if err := s.Remove(ctx(t), b.ID); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"blobs/sha256", "unpacked", "tmp", "locks"} {
		if n := dirCount(t, filepath.Join(s.Root(), sub)); n != 0 {
			t.Errorf("%d entries left in %s after removing every image", n, sub)
		}
	}
	if list, _ := s.List(ctx(t)); len(list) != 0 {
		t.Errorf("List after removing everything = %v", list)
	}
}

func TestPruneRemovesLeftovers(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	kept := importImage(t, s, imageOf(t, layerTar(t, file("f", "f", 0o644))), "kept")
	// What a crash mid-operation leaves: a half-unpacked tree in tmp/, a
	// stray blob and an unreferenced root filesystem.
	for _, p := range []string{"tmp/unpack-123/rootfs/etc", "unpacked/" + strings.Repeat("ab", 32) + "/rootfs/x"} {
		if err := os.MkdirAll(filepath.Join(s.Root(), p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.Root(), "blobs/sha256", strings.Repeat("cd", 32)), []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	before := blobCount(t, s.Root())
	if err := s.Prune(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := dirCount(t, filepath.Join(s.Root(), "tmp")); n != 0 {
		t.Errorf("%d entries left in tmp/", n)
	}
	if n := dirCount(t, filepath.Join(s.Root(), "unpacked")); n != 1 {
		t.Errorf("%d root filesystems, want 1", n)
	}
	if n := blobCount(t, s.Root()); n != before-1 {
		t.Errorf("%d blobs, want %d", n, before-1)
	}
	if _, err := s.Resolve(ctx(t), "kept"); err != nil {
		t.Errorf("Prune broke a kept image: %v", err)
	}
	if _, err := os.Stat(kept.RootFS); err != nil {
		t.Error(err)
	}
}

// TestResolveGivesTheBlobs checks what a backend that needs the image as
// layers relies on: the manifest, config and layer files are in the store,
// their bytes match their digests, and the manifest names the same config
// and layers.
func TestResolveGivesTheBlobs(t *testing.T) {
	testutil.RequiresRoot(t)
	s := newStore(t)
	img := imageOf(t, layerTar(t, file("a", "a", 0o644)), layerTar(t, file("b", "b", 0o644)))
	importImage(t, s, img, "layers:1")
	got, err := s.Resolve(ctx(t), "layers:1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ChainID == "" || len(got.Layers) != 2 {
		t.Fatalf("chain id %q, %d layers; want a chain id and 2 layers", got.ChainID, len(got.Layers))
	}
	blobs := append([]image.Blob{got.Manifest, got.ConfigBlob}, got.Layers[0].Blob, got.Layers[1].Blob)
	for _, b := range blobs {
		data, err := os.ReadFile(b.Path)
		if err != nil {
			t.Fatalf("blob %s: %v", b.Digest, err)
		}
		if sum := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); sum != b.Digest {
			t.Errorf("blob %s holds bytes of digest %s", b.Digest, sum)
		}
		if int64(len(data)) != b.Size || b.MediaType == "" {
			t.Errorf("blob %s: size %d (file %d), media type %q", b.Digest, b.Size, len(data), b.MediaType)
		}
	}
	if got.ConfigBlob.Digest != got.ID {
		t.Errorf("config blob %s, image id %s", got.ConfigBlob.Digest, got.ID)
	}
	var m struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	raw, _ := os.ReadFile(got.Manifest.Path)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.Digest != got.ID || len(m.Layers) != 2 || m.Layers[0].Digest != got.Layers[0].Digest || m.Layers[1].Digest != got.Layers[1].Digest {
		t.Errorf("manifest %s does not name the image's config and layers", raw)
	}
}

// TestBlobsOnlyStore checks the store as macOS and Windows hosts (and the
// backends that take images as layers) have it: an import keeps the blobs
// and unpacks nothing, the image has no root filesystem but all its
// layers, a lease holds them, and removing the image collects them.
func TestBlobsOnlyStore(t *testing.T) {
	root := t.TempDir()
	s, err := image.Open(image.Config{Root: root, BlobsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	img := imageOf(t, layerTar(t, file("a", "a", 0o644)), layerTar(t, file("b", "b", 0o644)))
	stored := importImage(t, s, img, "layers:1")
	if stored.RootFS != "" || len(stored.Layers) != 2 || stored.Size <= 0 {
		t.Fatalf("stored: RootFS %q, %d layers, size %d; want no root, 2 layers and their size", stored.RootFS, len(stored.Layers), stored.Size)
	}
	if n := dirCount(t, filepath.Join(root, "unpacked")); n != 0 {
		t.Errorf("a blobs-only store unpacked %d trees", n)
	}
	got, err := s.Resolve(ctx(t), "layers:1")
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	for _, l := range got.Layers {
		if _, err := os.Stat(l.Path); err != nil {
			t.Errorf("layer %s: %v", l.Digest, err)
		}
	}
	if err := s.Lease(ctx(t), "sandbox-1", got.ID); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if err := s.Remove(ctx(t), "layers:1"); err != nil {
		t.Fatal(err)
	}
	for _, l := range got.Layers {
		if _, err := os.Stat(l.Path); err != nil {
			t.Errorf("a leased image's layer %s went: %v", l.Digest, err)
		}
	}
	if err := s.Release(ctx(t), "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	for _, l := range got.Layers {
		if _, err := os.Stat(l.Path); err == nil {
			t.Errorf("layer %s outlived the image and its lease", l.Digest)
		}
	}
}
