package localsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	long := "/tmp/" + strings.Repeat("a-very-long-directory-name/", 10) + "root"
	tests := []struct {
		name, root, env, want string
	}{
		{name: "default root", root: "/var/lib/tupper", want: "/run/tupper.sock"},
		{name: "default root, trailing slash", root: "/var/lib/tupper/", want: "/run/tupper.sock"},
		{name: "nothing given", want: "/run/tupper.sock"},
		{name: "from the environment", env: "/var/lib/tupper", want: "/run/tupper.sock"},
		{name: "flag wins over the environment", root: "/srv/t", env: "/var/lib/tupper", want: hashedPath(runDir, "/srv/t")},
		{name: "other root", root: "/srv/t", want: hashedPath(runDir, "/srv/t")},
		{name: "other root, unclean", root: "/srv//t/", want: hashedPath(runDir, "/srv/t")},
		{name: "long root", root: long, want: hashedPath(runDir, long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRoot, tt.env)
			got := Of(tt.root)
			if got != tt.want {
				t.Errorf("Of(%q) = %q, want %q", tt.root, got, tt.want)
			}
			// sun_path holds 108 bytes, its terminating NUL among them.
			if len(got) > 107 {
				t.Errorf("Of(%q) = %q: %d bytes, more than a unix socket path holds", tt.root, got, len(got))
			}
		})
	}
}

func TestOfTellsRootsApart(t *testing.T) {
	a, b := Of("/tmp/te-1"), Of("/tmp/te-2")
	if a == b || a == DefaultPath || !strings.HasPrefix(a, "/run/tupper-") || !strings.HasSuffix(a, ".sock") {
		t.Errorf("sockets of two roots: %q and %q, want two different /run/tupper-<hash>.sock", a, b)
	}
}

func TestOfRelativeRoot(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if got, want := Of("state"), Of(filepath.Join(dir, "state")); got != want {
		t.Errorf("Of(relative) = %q, want that of the absolute path, %q", got, want)
	}
}

func TestURL(t *testing.T) {
	if got, ok := FromURL(URL("/run/tupper.sock")); !ok || got != "/run/tupper.sock" {
		t.Errorf("FromURL(URL(p)) = %q, %v", got, ok)
	}
	for _, bad := range []string{"http://127.0.0.1:3000", "unix://run/tupper.sock", "unix:///", "unix:"} {
		if p, ok := FromURL(bad); ok {
			t.Errorf("FromURL(%q) = %q, want it refused", bad, p)
		}
	}
}

func TestExists(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for path, want := range map[string]bool{sock: true, file: false, filepath.Join(dir, "none"): false, "": false} {
		if got := Exists(path); got != want {
			t.Errorf("Exists(%q) = %v, want %v", path, got, want)
		}
	}
}
