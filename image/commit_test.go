package image_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/lightbearco/tupper/image"
)

func TestCommitStacksALayer(t *testing.T) {
	s := newStore(t)
	base := importImage(t, s, imageOf(t,
		layerTar(t, dir("etc", 0o755), file("etc/keep", "base\n", 0o644), file("etc/gone", "x", 0o644)),
	), "base:1")

	layer := filepath.Join(t.TempDir(), "step.tar")
	if err := os.WriteFile(layer, layerTar(t,
		dir("opt", 0o755), file("opt/new", "step\n", 0o644), file("etc/.wh.gone", "", 0o644),
	), 0o600); err != nil {
		t.Fatal(err)
	}
	// Lazily: nothing is unpacked until the image is resolved.
	img, err := s.Commit(ctx(t), image.CommitOptions{
		Parent: "base:1", Layer: layer, CreatedBy: "RUN step",
		Edit:  func(c *v1.Config) { c.Env = append(c.Env, "STEP=1"); c.Labels = map[string]string{"k": "v"} },
		Names: []string{"built:1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != len(base.Layers)+1 || !slices.Contains(img.Names, "built:1") {
		t.Fatalf("committed image: %d layers (base %d), names %v", len(img.Layers), len(base.Layers), img.Names)
	}
	if _, err := os.Lstat(img.RootFS); !os.IsNotExist(err) {
		t.Errorf("a lazy commit unpacked its tree: %v", err)
	}
	got, err := s.Resolve(ctx(t), "built:1")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"etc/keep": "base\n", "opt/new": "step\n"} {
		if b, err := os.ReadFile(filepath.Join(got.RootFS, path)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(got.RootFS, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("the layer's whiteout did not remove etc/gone: %v", err)
	}
	if !slices.Contains(got.Config.Env, "STEP=1") || got.Config.Labels["k"] != "v" {
		t.Errorf("config: env %v labels %v", got.Config.Env, got.Config.Labels)
	}
	// The parent is untouched.
	if _, err := os.Lstat(filepath.Join(base.RootFS, "etc/gone")); err != nil {
		t.Errorf("the parent's tree changed: %v", err)
	}

	// Committed eagerly, the next step's tree is there at once.
	next, err := s.Commit(ctx(t), image.CommitOptions{Parent: got.ID, Layer: layer, CreatedBy: "again", Unpack: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(next.RootFS, "opt/new")); err != nil {
		t.Errorf("an eager commit did not unpack: %v", err)
	}
	if _, err := s.Commit(ctx(t), image.CommitOptions{Parent: "nope:1", Layer: layer}); err == nil {
		t.Error("commit on an unknown parent succeeded")
	}
}

// TestCommitWithoutALayer checks a commit of a config change alone: the
// new image has its parent's layers and root filesystem, and its own
// config.
func TestCommitWithoutALayer(t *testing.T) {
	s := newStore(t)
	base := importImage(t, s, imageOf(t, layerTar(t, dir("etc", 0o755), file("etc/keep", "base\n", 0o644))), "base:1")
	img, err := s.Commit(ctx(t), image.CommitOptions{
		Parent: "base:1", CreatedBy: "labels", Names: []string{"labelled:1"}, Unpack: true,
		Edit: func(c *v1.Config) { c.Labels = map[string]string{"k": "v"} },
	})
	if err != nil {
		t.Fatal(err)
	}
	if img.ID == base.ID || img.ChainID != base.ChainID || img.RootFS != base.RootFS || len(img.Layers) != len(base.Layers) {
		t.Errorf("config-only commit: id %s (base %s), chain %s (base %s), %d layers (base %d)", img.ID, base.ID, img.ChainID, base.ChainID, len(img.Layers), len(base.Layers))
	}
	if img.Config.Labels["k"] != "v" {
		t.Errorf("labels %v", img.Config.Labels)
	}
	if b, err := os.ReadFile(filepath.Join(img.RootFS, "etc/keep")); err != nil || string(b) != "base\n" {
		t.Errorf("etc/keep: %q, %v", b, err)
	}
}
