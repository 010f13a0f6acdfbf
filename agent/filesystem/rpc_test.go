package filesystem_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/internal/testutil"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

// unicodeName has spaces, combining-free Latin-1 letters and CJK, the kind
// of name that breaks naive quoting or byte/rune confusion.
const unicodeName = "ünïcødé 文件.txt"

func TestStat(t *testing.T) {
	dir := t.TempDir()
	spaced := filepath.Join(dir, "dir with space")
	mustMkdir(t, spaced)
	file := filepath.Join(spaced, unicodeName)
	mustWrite(t, file, "hello")
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink("nowhere", dangling); err != nil {
		t.Fatal(err)
	}
	ptr := func(s string) *string { return &s }
	tests := []struct {
		name string
		path string
		want *fspb.EntryInfo
		code connect.Code
	}{
		{name: "file with unicode and spaces", path: file, want: &fspb.EntryInfo{
			Name: unicodeName, Type: fspb.FileType_FILE_TYPE_FILE, Path: file, Size: 5,
			Mode: 0o640, Permissions: "-rw-r-----", Owner: "root", Group: "root",
		}},
		{name: "directory", path: spaced, want: &fspb.EntryInfo{
			Name: "dir with space", Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: spaced, Size: 4096,
			Mode: 0o755, Permissions: "drwxr-xr-x", Owner: "root", Group: "root",
		}},
		{name: "symlink is not followed", path: link, want: &fspb.EntryInfo{
			Name: "link", Type: fspb.FileType_FILE_TYPE_SYMLINK, Path: link, Size: int64(len(file)),
			Mode: 0o777, Permissions: "lrwxrwxrwx", Owner: "root", Group: "root", SymlinkTarget: ptr(file),
		}},
		{name: "dangling symlink names its target", path: dangling, want: &fspb.EntryInfo{
			Name: "dangling", Type: fspb.FileType_FILE_TYPE_SYMLINK, Path: dangling, Size: 7,
			Mode: 0o777, Permissions: "lrwxrwxrwx", Owner: "root", Group: "root",
			SymlinkTarget: ptr(filepath.Join(dir, "nowhere")),
		}},
		{name: "path is cleaned", path: spaced + "/../dir with space/./" + unicodeName, want: &fspb.EntryInfo{
			Name: unicodeName, Type: fspb.FileType_FILE_TYPE_FILE, Path: file, Size: 5,
			Mode: 0o640, Permissions: "-rw-r-----", Owner: "root", Group: "root",
		}},
		{name: "missing", path: filepath.Join(dir, "missing"), code: connect.CodeNotFound},
		{name: "under a file", path: filepath.Join(file, "x"), code: connect.CodeInvalidArgument},
		{name: "empty path", path: "", code: connect.CodeInvalidArgument},
	}
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := c.Stat(context.Background(), req(&fspb.StatRequest{Path: tt.path}, ""))
				if got := codeOf(err); got != tt.code {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
				}
				if tt.code != 0 {
					return
				}
				got := res.Msg.GetEntry()
				if mt := got.GetModifiedTime().AsTime(); time.Since(mt) > time.Minute || time.Until(mt) > time.Minute {
					t.Errorf("modified time %v is not recent", mt)
				}
				if got.Type == fspb.FileType_FILE_TYPE_DIRECTORY {
					got.Size = 4096 // filesystem-dependent
				}
				if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreFields(&fspb.EntryInfo{}, "modified_time")); diff != "" {
					t.Errorf("entry mismatch (-want +got):\n%s", diff)
				}
			})
		}
	})
}

func TestStatHome(t *testing.T) {
	// Relative paths and "~" resolve against the request user's home.
	home, err := os.UserHomeDir()
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root's home")
	}
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, p := range []string{"~", ".", "~/"} {
			res, err := c.Stat(context.Background(), req(&fspb.StatRequest{Path: p}, "root"))
			if err != nil {
				t.Fatalf("Stat(%q): %v", p, err)
			}
			if got := res.Msg.GetEntry().GetPath(); got != home {
				t.Errorf("Stat(%q).path = %q, want %q", p, got, home)
			}
		}
	})
}

func TestUnknownUser(t *testing.T) {
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		_, err := c.Stat(context.Background(), req(&fspb.StatRequest{Path: "/"}, "no-such-user-here"))
		if got := codeOf(err); got != connect.CodeUnauthenticated {
			t.Fatalf("code = %v, want unauthenticated (err %v)", got, err)
		}
	})
}

func TestMakeDir(t *testing.T) {
	requireRoot(t)
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		// Root's directories, which nobody may write in.
		dir := testutil.SharedTempDir(t)
		file := filepath.Join(dir, "file")
		mustWrite(t, file, "x")
		mustMkdir(t, filepath.Join(dir, "exists"))
		if err := os.Chmod(filepath.Join(dir, "exists"), 0o777); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name    string
			path    string
			code    connect.Code
			created []string // directories that must now belong to nobody
		}{
			{name: "with parents", path: filepath.Join(dir, "a", "b c", "文件夹"),
				created: []string{"a", "a/b c", "a/b c/文件夹"}},
			{name: "under existing", path: filepath.Join(dir, "exists", "new"), created: []string{"exists/new"}},
			{name: "existing directory", path: filepath.Join(dir, "exists"), code: connect.CodeAlreadyExists},
			{name: "existing file", path: file, code: connect.CodeInvalidArgument},
			{name: "parent is a file", path: filepath.Join(file, "sub"), code: connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := c.MakeDir(context.Background(), req(&fspb.MakeDirRequest{Path: tt.path}, "nobody"))
				if got := codeOf(err); got != tt.code {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
				}
				if tt.code != 0 {
					return
				}
				e := res.Msg.GetEntry()
				if e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || e.GetPath() != tt.path || e.GetOwner() != "nobody" {
					t.Errorf("entry = %v, want a directory at %s owned by nobody", e, tt.path)
				}
				for _, rel := range tt.created {
					st, err := os.Stat(filepath.Join(dir, rel))
					if err != nil {
						t.Fatal(err)
					}
					if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 65534 || !st.IsDir() {
						t.Errorf("%s: uid %d dir %v, want a directory owned by 65534", rel, uid, st.IsDir())
					}
				}
			})
		}
		// The pre-existing parent keeps its owner.
		if st, _ := os.Stat(filepath.Join(dir, "exists")); st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Error("MakeDir changed the owner of an existing parent")
		}
	})
}

func TestMove(t *testing.T) {
	requireRoot(t)
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		dir := testutil.SharedTempDir(t)
		mustWrite(t, filepath.Join(dir, "src.txt"), "data")
		mustMkdir(t, filepath.Join(dir, "tree", "sub"))
		mustWrite(t, filepath.Join(dir, "tree", "sub", "f"), "f")
		mustWrite(t, filepath.Join(dir, "old.txt"), "old")
		mustWrite(t, filepath.Join(dir, "over.txt"), "over")
		mustMkdir(t, filepath.Join(dir, "full", "x"))
		chownTree(t, dir, 65534) // the files nobody moves are nobody's
		tests := []struct {
			name, src, dst string
			code           connect.Code
			check          string // a file that must now exist under dst
			wantType       fspb.FileType
		}{
			{name: "file into new dirs", src: "src.txt", dst: "new dir/ünï/" + unicodeName, wantType: fspb.FileType_FILE_TYPE_FILE},
			{name: "directory tree", src: "tree", dst: "moved/tree", check: "sub/f", wantType: fspb.FileType_FILE_TYPE_DIRECTORY},
			{name: "replaces a file", src: "over.txt", dst: "old.txt", wantType: fspb.FileType_FILE_TYPE_FILE},
			{name: "missing source", src: "missing", dst: "whatever", code: connect.CodeNotFound},
			{name: "directory onto directory", src: "moved", dst: "full", code: connect.CodeAlreadyExists},
			{name: "file onto directory", src: "old.txt", dst: "full", code: connect.CodeAlreadyExists},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				src, dst := filepath.Join(dir, tt.src), filepath.Join(dir, tt.dst)
				res, err := c.Move(context.Background(), req(&fspb.MoveRequest{Source: src, Destination: dst}, "nobody"))
				if got := codeOf(err); got != tt.code {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
				}
				if tt.code != 0 {
					return
				}
				if e := res.Msg.GetEntry(); e.GetPath() != dst || e.GetType() != tt.wantType {
					t.Errorf("entry = %v, want %v at %s", e, tt.wantType, dst)
				}
				if _, err := os.Lstat(src); !os.IsNotExist(err) {
					t.Errorf("source still there: %v", err)
				}
				if _, err := os.Stat(filepath.Join(dst, tt.check)); err != nil {
					t.Error(err)
				}
			})
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "old.txt")); string(b) != "over" {
			t.Errorf("old.txt = %q after being replaced, want %q", b, "over")
		}
		// Parents made for the destination belong to the user.
		if st, _ := os.Stat(filepath.Join(dir, "new dir")); st.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Error("destination parent not owned by the request's user")
		}
	})
}

func TestListDir(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a/b/c/d", "dir with space", "e"} {
		mustMkdir(t, filepath.Join(dir, d))
	}
	for _, f := range []string{"top.txt", "a/a.txt", "a/b/b.txt", "a/b/c/c.txt", "a/b/c/d/d.txt", "dir with space/" + unicodeName} {
		mustWrite(t, filepath.Join(dir, f), f)
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "link-to-a")); err != nil {
		t.Fatal(err)
	}
	level1 := []string{"a", "dir with space", "e", "link-to-a", "top.txt"}
	level2 := append(level1, "a/a.txt", "a/b", "dir with space/"+unicodeName)
	level3 := append(level2, "a/b/b.txt", "a/b/c")
	all := append(level3, "a/b/c/c.txt", "a/b/c/d", "a/b/c/d/d.txt")
	tests := []struct {
		name  string
		path  string
		depth uint32
		want  []string // relative to path
		code  connect.Code
	}{
		{name: "depth 0 means 1", path: dir, depth: 0, want: level1},
		{name: "depth 1", path: dir, depth: 1, want: level1},
		{name: "depth 2", path: dir, depth: 2, want: level2},
		{name: "depth 3", path: dir, depth: 3, want: level3},
		{name: "deeper than the tree", path: dir, depth: 100, want: all},
		{name: "unicode directory", path: filepath.Join(dir, "dir with space"), want: []string{unicodeName}},
		{name: "through a symlink", path: filepath.Join(dir, "link-to-a"), depth: 1, want: []string{"a.txt", "b"}},
		{name: "empty directory", path: filepath.Join(dir, "e"), want: nil},
		{name: "a file", path: filepath.Join(dir, "top.txt"), code: connect.CodeInvalidArgument},
		{name: "missing", path: filepath.Join(dir, "missing"), code: connect.CodeNotFound},
	}
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := c.ListDir(context.Background(), req(&fspb.ListDirRequest{Path: tt.path, Depth: tt.depth}, ""))
				if got := codeOf(err); got != tt.code {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
				}
				if tt.code != 0 {
					return
				}
				var got []string
				for _, e := range res.Msg.GetEntries() {
					rel, err := filepath.Rel(tt.path, e.GetPath())
					if err != nil || filepath.Base(e.GetPath()) != e.GetName() {
						t.Errorf("entry %v: name and path disagree or path outside %s", e, tt.path)
					}
					got = append(got, rel)
				}
				want := append([]string(nil), tt.want...)
				sort.Strings(want)
				sort.Strings(got)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("entries mismatch (-want +got):\n%s", diff)
				}
			})
		}
		t.Run("types", func(t *testing.T) {
			res, err := c.ListDir(context.Background(), req(&fspb.ListDirRequest{Path: dir}, ""))
			if err != nil {
				t.Fatal(err)
			}
			types := map[string]fspb.FileType{}
			for _, e := range res.Msg.GetEntries() {
				types[e.GetName()] = e.GetType()
			}
			want := map[string]fspb.FileType{
				"a": fspb.FileType_FILE_TYPE_DIRECTORY, "dir with space": fspb.FileType_FILE_TYPE_DIRECTORY,
				"e": fspb.FileType_FILE_TYPE_DIRECTORY, "link-to-a": fspb.FileType_FILE_TYPE_SYMLINK,
				"top.txt": fspb.FileType_FILE_TYPE_FILE,
			}
			if diff := cmp.Diff(want, types); diff != "" {
				t.Errorf("types mismatch (-want +got):\n%s", diff)
			}
		})
	})
}

func TestRemove(t *testing.T) {
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		dir := t.TempDir()
		mustMkdir(t, filepath.Join(dir, "tree", "a", "b"))
		mustWrite(t, filepath.Join(dir, "tree", "a", "b", "f"), "f")
		mustWrite(t, filepath.Join(dir, unicodeName), "u")
		mustWrite(t, filepath.Join(dir, "target"), "t")
		if err := os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name, path string
			code       connect.Code
		}{
			{name: "unicode file", path: unicodeName},
			{name: "directory tree", path: "tree"},
			{name: "symlink only", path: "link"},
			{name: "missing", path: "missing", code: connect.CodeNotFound},
			{name: "already removed", path: "tree", code: connect.CodeNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				p := filepath.Join(dir, tt.path)
				_, err := c.Remove(context.Background(), req(&fspb.RemoveRequest{Path: p}, ""))
				if got := codeOf(err); got != tt.code {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
				}
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s still there: %v", p, err)
				}
			})
		}
		if _, err := os.Stat(filepath.Join(dir, "target")); err != nil {
			t.Errorf("removing the link removed its target: %v", err)
		}
	})
}
