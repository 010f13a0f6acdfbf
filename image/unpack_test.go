//go:build linux

package image_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestUnpackStaysInRoot feeds the unpacker layers that try to reach outside
// the root filesystem, directly or through symlinks.
func TestUnpackStaysInRoot(t *testing.T) {
	testutil.RequiresRoot(t)
	// host stands for the host's files: nothing may appear in or vanish from it.
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "victim"), []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", 20)

	tests := []struct {
		name    string
		layers  [][]byte
		wantErr string // part of the error; "" for success
		check   func(t *testing.T, rootfs string)
	}{
		{
			name:    "dot-dot name",
			layers:  [][]byte{layerTar(t, file("../escaped", "x", 0o644))},
			wantErr: `"../escaped" leads outside the image root`,
		},
		{
			name:    "dot-dot inside a name",
			layers:  [][]byte{layerTar(t, file("a/../../escaped", "x", 0o644))},
			wantErr: "leads outside the image root",
		},
		{
			name:    "dot-dot in a whiteout",
			layers:  [][]byte{layerTar(t, file("../.wh.victim", "", 0o644))},
			wantErr: "leads outside the image root",
		},
		{
			name:    "hard link out",
			layers:  [][]byte{layerTar(t, hardlink("passwd", "../../../../etc/passwd"))},
			wantErr: "leads outside the image root",
		},
		{
			name:    "hard link to nothing",
			layers:  [][]byte{layerTar(t, hardlink("link", "missing"))},
			wantErr: `hard link to "missing": no such file in the image`,
		},
		{
			name: "absolute symlink, then a file through it",
			layers: [][]byte{
				layerTar(t, symlink("escape", host)),
				layerTar(t, file("escape/pwned", "x", 0o644)),
			},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, host, "pwned")) // resolved inside the root
			},
		},
		{
			name:   "absolute symlink and a file through it in one layer",
			layers: [][]byte{layerTar(t, symlink("escape", host), file("escape/pwned", "x", 0o644))},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, host, "pwned"))
			},
		},
		{
			name: "relative symlink climbing out",
			layers: [][]byte{
				layerTar(t, dir("a/b", 0o755), symlink("a/b/up", up+strings.TrimPrefix(host, "/"))),
				layerTar(t, file("a/b/up/pwned", "x", 0o644)),
			},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, host, "pwned"))
			},
		},
		{
			name: "symlink to the root's parent directory",
			layers: [][]byte{
				layerTar(t, symlink("parent", "..")),
				layerTar(t, file("parent/pwned", "x", 0o644)),
			},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, "pwned"))
			},
		},
		{
			name: "whiteout through a symlink",
			layers: [][]byte{
				layerTar(t, symlink("escape", host)),
				layerTar(t, file("escape/.wh.victim", "", 0o644)),
			},
		},
		{
			name: "opaque whiteout through a symlink",
			layers: [][]byte{
				layerTar(t, symlink("escape", host)),
				layerTar(t, file("escape/.wh..wh..opq", "", 0o644)),
			},
		},
		{
			name: "hard link through a symlink",
			layers: [][]byte{
				layerTar(t, symlink("escape", host)),
				layerTar(t, hardlink("stolen", "escape/victim")),
			},
			wantErr: "no such file in the image",
		},
		{
			name: "symlink replaced by a file does not write through it",
			layers: [][]byte{
				layerTar(t, symlink("victim-link", filepath.Join(host, "victim"))),
				layerTar(t, file("victim-link", "overwritten", 0o644)),
			},
			check: func(t *testing.T, rootfs string) {
				b, err := os.ReadFile(filepath.Join(rootfs, "victim-link"))
				if err != nil || string(b) != "overwritten" {
					t.Errorf("victim-link = %q, %v", b, err)
				}
			},
		},
		{
			name:   "absolute names stay inside",
			layers: [][]byte{layerTar(t, file("/abs/file", "x", 0o644))},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, "abs/file"))
			},
		},
		{
			name: "device nodes are skipped",
			layers: [][]byte{layerTar(t,
				entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
				entry{name: "dev/mem", typ: tar.TypeChar, mode: 0o640},
				file("dev/ok", "ok", 0o644),
			)},
			check: func(t *testing.T, rootfs string) {
				mustExist(t, filepath.Join(rootfs, "dev/ok"))
				for _, p := range []string{"dev/sda", "dev/mem"} {
					if _, err := os.Lstat(filepath.Join(rootfs, p)); !os.IsNotExist(err) {
						t.Errorf("%s was created: %v", p, err)
					}
				}
			},
		},
		{
			name:    "truncated layer",
			layers:  [][]byte{truncate(layerTar(t, file("big", strings.Repeat("x", 4096), 0o644)), 1000)},
			wantErr: "not a valid tar archive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			img, err := s.Import(ctx(t), bytes.NewReader(dockerSave(t, savedImage{imageOf(t, tt.layers...), []string{"evil"}})), "", nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Import = %v, want an error containing %q", err, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("error %v is not of class ErrInvalidArgument", err)
				}
				if n := dirCount(t, filepath.Join(s.Root(), "unpacked")); n != 0 {
					t.Errorf("a refused image left %d root filesystems", n)
				}
				if n := dirCount(t, filepath.Join(s.Root(), "tmp")); n != 0 {
					t.Errorf("a refused image left %d entries in tmp/", n)
				}
			} else if err != nil {
				t.Fatalf("Import: %v", err)
			} else if tt.check != nil {
				tt.check(t, img[0].RootFS)
			}
			assertHostUntouched(t, host)
			if _, err := os.Lstat(filepath.Join(s.Root(), "tmp", "escaped")); err == nil {
				t.Errorf("an entry escaped into the store's tmp/")
			}
		})
	}
}

func mustExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("want %s: %v", p, err)
	}
}

func assertHostUntouched(t *testing.T, host string) {
	t.Helper()
	es, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name() != "victim" {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("host directory now holds %v, want only victim", names)
	}
	b, err := os.ReadFile(filepath.Join(host, "victim"))
	if err != nil || string(b) != "host file" {
		t.Errorf("host file changed: %q, %v", b, err)
	}
}

func truncate(b []byte, n int) []byte { return b[:n] }

// TestRemoveUnknown checks that errors about unknown names carry their class.
func TestRemoveUnknown(t *testing.T) {
	s := newStore(t)
	err := s.Remove(ctx(t), "nothing")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Remove(nothing) = %v, want ErrNotFound", err)
	}
	if err := s.Tag(ctx(t), "nothing", "else"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Tag(nothing) = %v, want ErrNotFound", err)
	}
	if err := s.Tag(ctx(t), "nothing", "Bad Name"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Tag to a bad name = %v, want ErrInvalidArgument", err)
	}
}
