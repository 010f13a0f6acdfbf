package filesystem_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/internal/testutil"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

// userTree is a host-side stand-in for a sandbox: home belongs to nobody (as
// /home/user belongs to user), system to root (as /etc does), with a
// world-readable file, a root-only directory, and links from home into
// system that code running as nobody could have planted.
type userTree struct {
	home, system string
	passwd       string // system/passwd, 0644 root
	private      string // system/private, 0700 root, holding a file "secret"
}

const passwdContent = "root:x:0:0:root:/root:/bin/bash\n"

func newUserTree(t *testing.T) *userTree {
	t.Helper()
	base := testutil.SharedTempDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	u := &userTree{home: filepath.Join(base, "home"), system: filepath.Join(base, "system")}
	u.passwd = filepath.Join(u.system, "passwd")
	u.private = filepath.Join(u.system, "private")
	mustMkdir(t, u.home)
	mustMkdir(t, u.private)
	if err := os.Chmod(u.private, 0o700); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, u.passwd, passwdContent)
	mustWrite(t, filepath.Join(u.private, "secret"), "root only")
	mustWrite(t, filepath.Join(u.home, "mine.txt"), "mine")
	for link, target := range map[string]string{"data.csv": u.passwd, "d": u.system} {
		if err := os.Symlink(target, filepath.Join(u.home, link)); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, u.home, 65534)
	return u
}

// unchanged fails the test unless system is as newUserTree made it.
func (u *userTree) unchanged(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(u.passwd)
	if err != nil || string(b) != passwdContent {
		t.Errorf("passwd = %q, %v; want it unchanged", b, err)
	}
	des, err := os.ReadDir(u.system)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 2 {
		t.Errorf("system holds %d entries, want passwd and private only", len(des))
	}
	for _, p := range []string{u.system, u.passwd, u.private} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 {
			t.Errorf("%s belongs to uid %d, want root", p, uid)
		}
	}
}

// TestActsAsTheUser checks that every Filesystem RPC done for nobody is
// done with nobody's permissions: links that nobody's code planted in its
// home lead nowhere nobody could not go, and root keeps its reach.
func TestActsAsTheUser(t *testing.T) {
	requireRoot(t)
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		u := newUserTree(t)
		ctx := t.Context()
		in := func(rel string) string { return filepath.Join(u.home, rel) }
		tests := []struct {
			name string
			call func() error
			code connect.Code
		}{
			{"mkdir through a linked directory", func() error {
				_, err := c.MakeDir(ctx, req(&fspb.MakeDirRequest{Path: in("d/sub/deeper")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"move into a linked directory", func() error {
				_, err := c.Move(ctx, req(&fspb.MoveRequest{Source: in("mine.txt"), Destination: in("d/mine.txt")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"move over a linked file's directory entry", func() error {
				_, err := c.Move(ctx, req(&fspb.MoveRequest{Source: in("mine.txt"), Destination: in("d/passwd")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"move root's file out through a link", func() error {
				_, err := c.Move(ctx, req(&fspb.MoveRequest{Source: in("d/passwd"), Destination: in("stolen")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"remove through a linked directory", func() error {
				_, err := c.Remove(ctx, req(&fspb.RemoveRequest{Path: in("d/passwd")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"remove a root-only tree through a link", func() error {
				_, err := c.Remove(ctx, req(&fspb.RemoveRequest{Path: in("d/private")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"stat inside a root-only directory", func() error {
				_, err := c.Stat(ctx, req(&fspb.StatRequest{Path: in("d/private/secret")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"list a root-only directory", func() error {
				_, err := c.ListDir(ctx, req(&fspb.ListDirRequest{Path: in("d/private")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"watch a root-only directory", func() error {
				_, err := c.CreateWatcher(ctx, req(&fspb.CreateWatcherRequest{Path: in("d/private")}, "nobody"))
				return err
			}, connect.CodePermissionDenied},
			{"list through a link the user may read", func() error {
				res, err := c.ListDir(ctx, req(&fspb.ListDirRequest{Path: in("d")}, "nobody"))
				if err == nil && len(res.Msg.GetEntries()) != 2 {
					t.Errorf("listing through the link: %d entries, want 2", len(res.Msg.GetEntries()))
				}
				return err
			}, 0},
			{"remove the link itself", func() error {
				_, err := c.Remove(ctx, req(&fspb.RemoveRequest{Path: in("data.csv")}, "nobody"))
				return err
			}, 0},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := codeOf(tt.call()); got != tt.code {
					t.Errorf("code = %v, want %v", got, tt.code)
				}
				u.unchanged(t)
			})
		}
		if b, err := os.ReadFile(in("mine.txt")); err != nil || string(b) != "mine" {
			t.Errorf("nobody's own file after the refused moves: %q, %v", b, err)
		}
		// Root still reaches everything.
		if _, err := c.MakeDir(ctx, req(&fspb.MakeDirRequest{Path: filepath.Join(u.private, "made by root")}, "root")); err != nil {
			t.Errorf("root's mkdir in a root-only directory: %v", err)
		}
		if _, err := c.Stat(ctx, req(&fspb.StatRequest{Path: filepath.Join(u.private, "secret")}, "root")); err != nil {
			t.Errorf("root's stat in a root-only directory: %v", err)
		}
	})
}

// TestRecursiveWatchSkipsWhatTheUserCannotRead checks that a recursive watch
// acting as nobody reports nothing from a directory nobody may not read: no
// names of root's files leak through it.
func TestRecursiveWatchSkipsWhatTheUserCannotRead(t *testing.T) {
	requireRoot(t)
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		u := newUserTree(t)
		locked := filepath.Join(u.home, "locked")
		mustMkdir(t, locked)
		if err := os.Chmod(locked, 0o700); err != nil { // root's, inside nobody's home
			t.Fatal(err)
		}
		w := startWatchDir(t, c, req(&fspb.WatchDirRequest{Path: u.home, Recursive: true}, "nobody"))
		mustWrite(t, filepath.Join(locked, "root-secret-name"), "x")
		// A directory created later that nobody may not read is not watched
		// either. Whether the watcher gets to it before or after the file
		// inside, that file's event would come before the marker's.
		later := filepath.Join(u.home, "later")
		if err := os.Mkdir(later, 0o700); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(later, "another-secret"), "x")
		mustWrite(t, filepath.Join(u.home, "marker"), "x")
		w.expect(t, ev{"later", create}, ev{"marker", create})
		for _, e := range w.seen {
			if e.name == "locked/root-secret-name" || e.name == "later/another-secret" {
				t.Errorf("a watch as nobody reported %v inside a directory only root may read", e)
			}
		}
	})
}
