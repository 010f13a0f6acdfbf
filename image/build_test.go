//go:build linux

package image_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

func TestBuildOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    image.BuildOptions
		wantErr bool
	}{
		{name: "zero", opts: image.BuildOptions{}},
		{name: "base", opts: image.BuildOptions{Packages: image.BaseTemplatePackages}},
		{name: "versioned package", opts: image.BuildOptions{Packages: []string{"bash=5.2.15-2+b2", "libc6:amd64"}}},
		{name: "option as package", opts: image.BuildOptions{Packages: []string{"--setup-hook=rm -rf /"}}, wantErr: true},
		{name: "package with comma", opts: image.BuildOptions{Packages: []string{"bash,curl"}}, wantErr: true},
		{name: "bad suite", opts: image.BuildOptions{Suite: "../etc"}, wantErr: true},
		{name: "bad variant", opts: image.BuildOptions{Variant: "--x"}, wantErr: true},
		{name: "bad mirror", opts: image.BuildOptions{Mirror: "deb.debian.org"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr != (err != nil) {
				t.Fatalf("Validate() = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not of class ErrInvalidArgument", err)
			}
		})
	}
}

// TestBuildDebian runs the one real mmdebstrap build of the suite (half a
// minute or more). Other tests that need Debian use testutil.TestRootFS,
// which is built once per machine.
func TestBuildDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Debian image with mmdebstrap (about 30 s)")
	}
	testutil.RequiresRoot(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testutil.Skip(t, "needs mmdebstrap: apt-get install mmdebstrap")
	}
	s := newStore(t)
	rec := &recorder{}
	start := time.Now()
	// Half a minute on an idle machine; a loaded one (the suite runs
	// packages side by side) takes several times that.
	bctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	img, err := s.BuildDebian(bctx, "tiny", image.BuildOptions{Packages: []string{"bash"}}, rec)
	if err != nil {
		t.Fatalf("BuildDebian: %v", err)
	}
	t.Logf("built in %s", time.Since(start).Round(time.Second))

	if diff := cmp.Diff([]string{"tiny"}, img.Names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/bin/bash"}, img.Config.Cmd); diff != "" {
		t.Errorf("Cmd (-want +got):\n%s", diff)
	}
	if n := rec.count(image.PhaseBuild, func(e image.Event) bool { return strings.HasPrefix(e.Message, "I: ") }); n == 0 {
		t.Errorf("no mmdebstrap output reached the progress")
	}
	// mmdebstrap's output told every step, one after the other (their
	// names are TestDebianProgress's), and the packages each step that
	// installs them set up.
	var steps []int64
	setUp := map[int64]int64{}
	for _, e := range rec.list() {
		switch e.Phase {
		case image.PhaseStep:
			if e.Total != 11 {
				t.Errorf("step %d of %d, want 11 steps", e.Current, e.Total)
			}
			steps = append(steps, e.Current)
		case image.PhasePackages:
			if e.Message == "set up" && e.Current == e.Total {
				setUp[steps[len(steps)-1]] = e.Total
			}
		}
	}
	if diff := cmp.Diff([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if setUp[4] == 0 || setUp[5] == 0 {
		t.Errorf("packages set up to the last, by step: %v; want the essential ones (step 4) and the others (5)", setUp)
	}
	root := img.RootFS
	if target, err := os.Readlink(filepath.Join(root, "bin")); err != nil || target != "usr/bin" {
		t.Errorf("bin -> %q, %v; want the merged /usr link", target, err)
	}
	if st, err := os.Stat(filepath.Join(root, "usr/bin/bash")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("usr/bin/bash is not an executable: %v", err)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("etc/passwd lacks the user account:\n%s", passwd)
	}
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !strings.Contains(string(group), "\nuser:x:1000:") {
		t.Errorf("etc/group lacks the user group:\n%s", group)
	}
	st, err := os.Stat(filepath.Join(root, "home/user"))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Sys().(*syscall.Stat_t); s.Uid != 1000 || s.Gid != 1000 {
		t.Errorf("home/user owned by %d:%d, want 1000:1000", s.Uid, s.Gid)
	}
	// The account works: bash runs as user, and the image knows its home.
	out, err := exec.Command("chroot", "--userspec=1000:1000", root, "/bin/bash", "-c", "echo $(id -un) ~user").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "user /home/user" {
		t.Errorf("bash as user: %v: %q", err, out)
	}
	checkLoginShell(t, root)
	if got, err := s.Resolve(ctx(t), "tiny"); err != nil || got.ID != img.ID {
		t.Errorf("Resolve(tiny) = %v, %v", got, err)
	}
	if n := dirCount(t, filepath.Join(s.Root(), "tmp")); n != 0 {
		t.Errorf("%d leftovers in tmp/", n)
	}
}
