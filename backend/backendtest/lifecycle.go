package backendtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

func (s *suite) testRunning(t *testing.T, id string, info *backend.Sandbox) {
	st, err := s.b.State(ctx(t), id)
	if err != nil || st != backend.StateRunning {
		t.Errorf("State(%s) = %q, %v; want %q", id, st, err, backend.StateRunning)
	}
	ids, err := s.b.List(ctx(t))
	if err != nil || !slices.Contains(ids, id) {
		t.Errorf("List = %q, %v; want it to hold %s", ids, err, id)
	}
	if info.StartedAt.IsZero() || time.Since(info.StartedAt) > time.Hour {
		t.Errorf("StartedAt = %v", info.StartedAt)
	}
	_, err = s.b.Start(ctx(t), s.spec(id))
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second Start(%s): err = %v, want errdefs.ErrAlreadyExists", id, err)
	}
	if st, err := s.b.State(ctx(t), "btnosuchsandbox"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State of an unknown id = %q, %v; want errdefs.ErrNotFound", st, err)
	}
	if err := s.b.Stop(ctx(t), "btnosuchsandbox"); err != nil {
		t.Errorf("Stop of an unknown id: %v, want nil", err)
	}
}

// testRootFS checks that the sandbox's root directory looks like the
// image's: a backend that puts a copy-on-write layer over the image must
// give the layer's root the image root's owner and permissions, or
// unprivileged users cannot reach anything.
func (s *suite) testRootFS(t *testing.T, sb *sdk.Sandbox) {
	st, err := os.Stat(s.cfg.RootFS)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%o", st.Mode().Perm())
	res, err := sb.Commands.Run(ctx(t), "stat -c %a /", sdk.WithUser("root"), sdk.WithCwd("/"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.Stdout); got != want {
		t.Errorf("the sandbox's / has mode %s, the image's root %s: the copy-on-write layer hides the image's permissions", got, want)
	}
}

// testIsolation starts a second sandbox from the same image and checks that
// the two do not share a filesystem, and that the image itself is never
// written.
func (s *suite) testIsolation(t *testing.T, sb *sdk.Sandbox) {
	const marker = "/tmp/backendtest-marker"
	run(t, sb, "echo one > "+marker)
	run(t, sb, "echo changed >> /etc/hostname", sdk.WithUser("root"))
	before, _ := os.ReadFile(filepath.Join(s.cfg.RootFS, "etc", "hostname"))

	id := s.newID()
	s.start(t, id)
	other, err := s.c.Connect(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Files.Exists(ctx(t), marker); ok || err != nil {
		t.Errorf("the second sandbox sees the first one's %s (%v)", marker, err)
	}
	if res := run(t, other, "cat /etc/hostname || true"); strings.Contains(res.Stdout, "changed") {
		t.Error("the second sandbox sees the first one's /etc/hostname")
	}
	if _, err := os.Stat(filepath.Join(s.cfg.RootFS, marker)); !os.IsNotExist(err) {
		t.Errorf("the image at %s was written: %s exists (%v)", s.cfg.RootFS, marker, err)
	}
	if after, _ := os.ReadFile(filepath.Join(s.cfg.RootFS, "etc", "hostname")); string(after) != string(before) || strings.Contains(string(after), "changed") {
		t.Errorf("the image's /etc/hostname changed: %q", after)
	}
	if err := s.b.Stop(ctx(t), id); err != nil {
		t.Errorf("Stop(%s): %v", id, err)
	}
}

func (s *suite) testStop(t *testing.T, id string, sb *sdk.Sandbox) {
	if err := s.b.Stop(ctx(t), id); err != nil {
		t.Fatalf("Stop(%s): %v", id, err)
	}
	if st, err := s.b.State(ctx(t), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Stop = %q, %v; want errdefs.ErrNotFound", st, err)
	}
	ids, err := s.b.List(ctx(t))
	if err != nil {
		t.Errorf("List after Stop: %v", err)
	} else if slices.Contains(ids, id) {
		t.Errorf("List after Stop still holds %s: %q", id, ids)
	}
	if err := s.b.Stop(ctx(t), id); err != nil {
		t.Errorf("a second Stop(%s): %v, want nil", id, err)
	}
	hctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if running, _ := sb.IsRunning(hctx); running {
		t.Error("the agent still answers after Stop")
	}
}
