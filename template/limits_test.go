package template

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// TestUploadBounds checks on a real directory that a team's uploads keep
// at most MaxTeamUploadBytes together, each team on its own, and that
// files no build asked for within uploadTTL make room.
func TestUploadBounds(t *testing.T) {
	root := t.TempDir()
	b := &Builder{cfg: Config{Root: root, MaxUploadBytes: 1 << 20, MaxTeamUploadBytes: 3 << 20}, uploads: filepath.Join(root, "uploads")}
	hash := func(i int) string { return fmt.Sprintf("%064x", i) }
	mib := func() *bytes.Reader { return bytes.NewReader(make([]byte, 1<<20)) }
	for i := range 3 {
		if err := b.PutUpload("red", hash(i), mib()); err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	if err := b.PutUpload("red", hash(3), mib()); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("an upload past the team's bound: %v, want failed precondition", err)
	}
	if err := b.PutUpload("blue", hash(4), bytes.NewReader(make([]byte, 2<<20))); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an upload past the bound of one file: %v, want invalid argument", err)
	}
	if err := b.PutUpload("blue", hash(3), mib()); err != nil {
		t.Errorf("another team's upload: %v", err)
	}

	// One file no build asked for in a day, one a build asked for just
	// now: the first goes, the second stays.
	old := time.Now().Add(-uploadTTL - time.Hour)
	for _, i := range []int{0, 1} {
		p, _, _ := b.UploadPath("red", hash(i))
		os.Chtimes(p, old, old)
	}
	p1, _, _ := b.UploadPath("red", hash(1))
	keepUpload(p1)
	if err := b.PutUpload("red", hash(3), mib()); err != nil {
		t.Fatalf("an upload once an old one may go: %v", err)
	}
	for i, want := range map[int]bool{0: false, 1: true, 2: true, 3: true} {
		if _, ok, _ := b.UploadPath("red", hash(i)); ok != want {
			t.Errorf("upload %d there: %v, want %v", i, ok, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(p1))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "upload-") {
			t.Errorf("a temporary file is left: %s", e.Name())
		}
	}
}

func TestPruneBuilds(t *testing.T) {
	tpl := &Template{Tags: map[string]string{}}
	for i := range maxBuildsPerTemplate + 10 {
		st := StatusReady
		if i == 1 {
			st = StatusBuilding
		}
		tpl.Builds = append(tpl.Builds, &Build{ID: fmt.Sprint("b", i), Status: st})
	}
	tpl.Tags["default"] = "b0"
	pruneBuilds(tpl)
	if len(tpl.Builds) != maxBuildsPerTemplate {
		t.Fatalf("%d builds kept, want %d", len(tpl.Builds), maxBuildsPerTemplate)
	}
	ids := map[string]bool{}
	for _, bd := range tpl.Builds {
		ids[bd.ID] = true
	}
	for _, id := range []string{"b0", "b1", fmt.Sprint("b", maxBuildsPerTemplate+9)} {
		if !ids[id] {
			t.Errorf("build %s was dropped: a tagged one, one under way and the newest stay", id)
		}
	}
	if ids["b2"] {
		t.Error("the oldest build neither tagged nor under way was kept")
	}
}
