package userfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

var root = &identity.User{Name: "root", Home: "/root"}

func TestClassify(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	_, notExist := os.Stat(filepath.Join(dir, "missing"))
	_, notDir := os.Stat(filepath.Join(file, "x"))
	exist := os.Mkdir(dir, 0o755)
	tests := []struct {
		name  string
		err   error
		class error
	}{
		{"not exist", notExist, errdefs.ErrNotFound},
		{"exist", exist, errdefs.ErrAlreadyExists},
		{"not a directory", notDir, errdefs.ErrInvalidArgument},
		{"no space", &os.PathError{Op: "write", Path: file, Err: syscall.ENOSPC}, errdefs.ErrResourceExhausted},
		{"quota", &os.PathError{Op: "write", Path: file, Err: syscall.EDQUOT}, errdefs.ErrResourceExhausted},
		{"cross device", &os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.EXDEV}, errdefs.ErrFailedPrecondition},
		{"already classified", errdefs.ErrUnauthenticated, errdefs.ErrUnauthenticated},
		{"unknown", errors.New("boom"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := userfs.Classify(tt.err)
			if tt.class == nil {
				if got != tt.err {
					t.Errorf("Classify changed an unclassifiable error: %v", got)
				}
				return
			}
			if !errors.Is(got, tt.class) || !errors.Is(got, tt.err) {
				t.Errorf("Classify(%v) = %v: want both %v and the original in its chain", tt.err, got, tt.class)
			}
			if got.Error() != tt.err.Error() {
				t.Errorf("message changed: %q, want %q", got.Error(), tt.err.Error())
			}
		})
	}
	if userfs.Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "exec"), []byte("old"), 0o700)
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	os.Symlink("nowhere/new", filepath.Join(dir, "dangling"))
	os.Symlink("exec", filepath.Join(dir, "link"))
	tests := []struct {
		name     string
		path     string
		r        io.Reader
		class    error
		readErr  bool
		check    string // file to read afterwards
		want     string
		wantMode os.FileMode
	}{
		{name: "new file with parents", path: "a/b/new", r: strings.NewReader("new"), check: "a/b/new", want: "new", wantMode: userfs.FileMode},
		{name: "keeps mode", path: "exec", r: strings.NewReader("replaced"), check: "exec", want: "replaced", wantMode: 0o700},
		{name: "through a link", path: "link", r: strings.NewReader("linked"), check: "exec", want: "linked", wantMode: 0o700},
		{name: "dangling link creates its target", path: "dangling", r: strings.NewReader("d"), check: "nowhere/new", want: "d", wantMode: userfs.FileMode},
		{name: "directory", path: "adir", r: strings.NewReader("x"), class: errdefs.ErrInvalidArgument},
		{name: "reader fails", path: "exec", r: io.MultiReader(strings.NewReader("partial"), errReader{}), readErr: true, check: "exec", want: "linked", wantMode: 0o700},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := userfs.WriteFile(filepath.Join(dir, tt.path), tt.r, root)
			var re *userfs.ReadError
			switch {
			case tt.readErr:
				if !errors.As(err, &re) {
					t.Fatalf("err = %v, want a *ReadError", err)
				}
			case tt.class != nil:
				if !errors.Is(err, tt.class) {
					t.Fatalf("err = %v, want class %v", err, tt.class)
				}
			case err != nil:
				t.Fatal(err)
			}
			if tt.check != "" {
				p := filepath.Join(dir, tt.check)
				b, err := os.ReadFile(p)
				if err != nil || string(b) != tt.want {
					t.Errorf("%s = %q (%v), want %q", tt.check, b, err, tt.want)
				}
				if st, _ := os.Stat(p); st.Mode().Perm() != tt.wantMode {
					t.Errorf("mode = %v, want %v", st.Mode().Perm(), tt.wantMode)
				}
			}
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && userfs.IsTempName(d.Name()) {
					t.Errorf("temporary file left: %s", p)
				}
				return nil
			})
		})
	}
}
