package filesystem

import (
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// statEntry describes the file at path (an absolute, clean path) without
// following a symbolic link at its end, as ls -l does.
func statEntry(path string) (*fspb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return newNamer().entry(path, fi), nil
}

// namer turns uids and gids into names. os/user rereads /etc/passwd and
// /etc/group on every lookup in a static binary, so one namer caches them for
// the length of one request (a listing of thousands of files repeats the
// same few owners); it is not safe for concurrent use.
type namer struct {
	users, groups map[uint32]string
}

func newNamer() *namer {
	return &namer{users: map[uint32]string{}, groups: map[uint32]string{}}
}

func (n *namer) user(uid uint32) string {
	if name, ok := n.users[uid]; ok {
		return name
	}
	name := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	n.users[uid] = name
	return name
}

func (n *namer) group(gid uint32) string {
	if name, ok := n.groups[gid]; ok {
		return name
	}
	name := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(name); err == nil {
		name = g.Name
	}
	n.groups[gid] = name
	return name
}

// entry builds the EntryInfo of the file at path from its Lstat result.
// Owner and group fall back to numeric ids when the sandbox has no name for
// them.
func (n *namer) entry(path string, fi fs.FileInfo) *fspb.EntryInfo {
	e := &fspb.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fileType(fi.Mode()),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  permissions(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = n.user(st.Uid)
		e.Group = n.group(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, ok := linkTarget(path); ok {
			e.SymlinkTarget = &target
		}
	}
	return e
}

// linkTarget returns the absolute path a symbolic link finally resolves to.
// A dangling link still reports the path it names, so clients can see where
// it points.
func linkTarget(path string) (string, bool) {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		return t, true
	}
	t, err := os.Readlink(path)
	if err != nil {
		return "", false
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(path), t)
	}
	return filepath.Clean(t), true
}

func fileType(m fs.FileMode) fspb.FileType {
	switch {
	case m.IsRegular():
		return fspb.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return fspb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return fspb.FileType_FILE_TYPE_SYMLINK
	}
	// Devices, sockets and pipes have no FileType of their own.
	return fspb.FileType_FILE_TYPE_UNSPECIFIED
}

// permissions renders m the way ls -l does ("-rw-r--r--", "drwxr-xr-x",
// "lrwxrwxrwx", "-rwsr-xr-x"). Go's FileMode.String differs for links ("L")
// and special bits, and clients show this string to people used to ls.
func permissions(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[1+i] = rwx[i]
		}
	}
	special := func(set bool, at int, on, off byte) {
		if !set {
			return
		}
		if b[at] == '-' {
			b[at] = off
		} else {
			b[at] = on
		}
	}
	special(m&fs.ModeSetuid != 0, 3, 's', 'S')
	special(m&fs.ModeSetgid != 0, 6, 's', 'S')
	special(m&fs.ModeSticky != 0, 9, 't', 'T')
	return string(b)
}
