package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/image"
)

// addImage imports a random one-layer image named ref into st, labelled
// as team's when team is set.
func addImage(t *testing.T, st *image.Store, ref, team string) *image.Image {
	t.Helper()
	img, err := random.Image(4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	if team != "" {
		if img, err = mutate.Config(img, v1.Config{Labels: map[string]string{engine.LabelTeam: team}}); err != nil {
			t.Fatal(err)
		}
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	got, err := st.Import(context.Background(), &buf, "", nil)
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	return got[0]
}

// TestListImages serves GET /images from a real image store: each team
// sees the images every team may start from and its own, with their
// unpacked sizes.
func TestListImages(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := image.Open(image.Config{Root: filepath.Join(dir, "images")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	base := addImage(t, st, "base", "")
	mine := addImage(t, st, "mine", auth.DefaultTeam)
	theirs := addImage(t, st, "theirs", "other")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: backendtest.NewFake(), BackendName: "fake",
		Images: st, AgentPath: exe, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	srv, err := New(Config{Engine: eng, Keys: keys, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	list := func(team string) []imageJSON {
		t.Helper()
		key, _, err := keys.CreateInTeam(ctx, team, "key-"+team)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", hs.URL+"/images", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Images []imageJSON }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /images as team %s: %s, %v", team, resp.Status, err)
		}
		slices.SortFunc(out.Images, func(a, b imageJSON) int { return strings.Compare(a.Names[0], b.Names[0]) })
		return out.Images
	}
	row := func(img *image.Image, shared bool) imageJSON {
		return imageJSON{ID: img.ID, Names: img.Names, Size: img.Size, Created: img.Created, Shared: shared}
	}
	for _, img := range []*image.Image{base, mine, theirs} {
		if img.Size <= 0 {
			t.Errorf("image %v: size %d", img.Names, img.Size)
		}
	}
	if diff := cmp.Diff([]imageJSON{row(base, true), row(mine, false)}, list(auth.DefaultTeam)); diff != "" {
		t.Errorf("the default team's images (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]imageJSON{row(base, true), row(theirs, false)}, list("other")); diff != "" {
		t.Errorf("team other's images (-want +got):\n%s", diff)
	}
}

// TestListImagesUnsupported checks that an engine whose images cannot be
// listed answers 501, not an empty list.
func TestListImagesUnsupported(t *testing.T) {
	e := newTestEnv(t)
	if status, _, body := e.do("GET", "/images", ""); status != http.StatusNotImplemented {
		t.Errorf("GET /images on images that cannot be listed: %d %s, want 501", status, body)
	}
}
