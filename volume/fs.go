package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/lightbearco/tupper/errdefs"
)

// FS is a mounted volume's content, read and written on a client's behalf
// (E2B's volume content routes). Paths are slash-separated and taken from
// the volume's top, "/": "a/b", "/a/b" and "/x/../a/b" are one path.
//
// The volume is shared with sandboxes, which may leave symbolic links to
// anywhere in it, or swap a directory for one while a call runs. FS works
// through an os.Root, which walks every path one element at a time from
// the volume's top and refuses any link that leads outside it (its
// target absolute, or climbing above the top): no call reads, writes,
// changes or removes anything but the volume's own files, and a link
// that leads out fails with errdefs.ErrInvalidArgument.
//
// An FS is safe for concurrent use.
type FS struct {
	root *os.Root
	dir  string
}

// Limits of a listing: it is answered in one piece.
const (
	// MaxListDepth is the deepest a listing may go.
	MaxListDepth = 64
	// MaxListEntries is the most entries a listing answers.
	MaxListEntries = 10000
)

// maxPath bounds a path given to FS, as Linux's PATH_MAX does.
const maxPath = 4096

// uploadPrefix starts the names of files being written (Write): they are
// renamed into place once whole.
const uploadPrefix = ".tupper-upload-"

// Attrs are the owner and mode to give an entry; nil fields mean "as it
// is" for an existing entry and the defaults (DefaultUID, DefaultGID, 0644
// for files and 0755 for directories) for a new one.
type Attrs struct {
	UID, GID *uint32
	Mode     *uint32
}

// maxID bounds uids and gids: above it chown reads them as "unchanged"
// or as no one.
const maxID = 1<<31 - 1

// Validate checks a's values: ids up to 2^31-1, and permission bits with
// the sticky bit but neither setuid nor setgid, which a volume (mounted
// nosuid) could not honour anyway.
func (a Attrs) Validate() error {
	for _, id := range []*uint32{a.UID, a.GID} {
		if id != nil && *id > maxID {
			return fmt.Errorf("uid and gid must be at most %d, not %d: %w", maxID, *id, errdefs.ErrInvalidArgument)
		}
	}
	if a.Mode != nil && *a.Mode&^0o1777 != 0 {
		return fmt.Errorf("mode %#o: only permission bits and the sticky bit (at most 01777) may be set: %w", *a.Mode, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Open opens the content of the mounted volume in dir.
func Open(dir string) (*FS, error) {
	r, err := os.OpenRoot(DataDir(dir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("volume %s is not mounted: %w", dir, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("open volume: %w", err)
	}
	return &FS{root: r, dir: dir}, nil
}

// Close releases f.
func (f *FS) Close() error { return f.root.Close() }

// Usage reports how much of the volume is taken.
func (f *FS) Usage() (Usage, error) { return UsageOf(f.dir) }

// Clean returns p as FS takes it: absolute from the volume's top, without
// "." or ".." elements (".." at the top stays at the top). It fails for a
// path holding a NUL byte or longer than Linux takes.
func Clean(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q holds a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	}
	if len(p) > maxPath {
		return "", fmt.Errorf("path of %d bytes is longer than %d: %w", len(p), maxPath, errdefs.ErrInvalidArgument)
	}
	return path.Clean("/" + p), nil
}

// rel is clean path c as os.Root takes it.
func rel(c string) string {
	if c == "/" {
		return "."
	}
	return c[1:]
}

// Stat describes the entry at p; a symbolic link is described itself, not
// its target.
func (f *FS) Stat(p string) (*Entry, error) {
	c, err := Clean(p)
	if err != nil {
		return nil, err
	}
	return f.stat(c)
}

func (f *FS) stat(c string) (*Entry, error) {
	fi, err := f.root.Lstat(rel(c))
	if err != nil {
		return nil, classify("stat", c, err)
	}
	e := f.entry(c, fi)
	return &e, nil
}

// entry describes the entry at clean path c, of which fi tells.
func (f *FS) entry(c string, fi fs.FileInfo) Entry {
	e := Entry{Name: path.Base(c), Path: c, Size: fi.Size(), Mode: modeBits(fi.Mode()), Mtime: fi.ModTime()}
	switch {
	case fi.Mode().IsRegular():
		e.Type = TypeFile
	case fi.IsDir():
		e.Type = TypeDirectory
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
		e.Target, _ = f.root.Readlink(rel(c))
	default:
		e.Type = TypeUnknown
	}
	fillOwner(&e, fi)
	return e
}

// modeBits is m as the numeric permission bits chmod takes.
func modeBits(m fs.FileMode) uint32 {
	out := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

// List describes what the directory at p holds, depth levels down (1
// means its own entries), in name order, each directory before what it
// holds. Symbolic links are listed, never followed.
func (f *FS) List(p string, depth int) ([]Entry, error) {
	c, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if depth < 1 {
		depth = 1
	}
	if depth > MaxListDepth {
		return nil, fmt.Errorf("depth %d is more than %d: %w", depth, MaxListDepth, errdefs.ErrInvalidArgument)
	}
	fi, err := f.root.Stat(rel(c))
	if err != nil {
		return nil, classify("list", c, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list %s: not a directory: %w", c, errdefs.ErrInvalidArgument)
	}
	out := []Entry{}
	if err := f.walk(c, depth, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *FS) walk(dir string, depth int, out *[]Entry) error {
	d, err := f.root.Open(rel(dir))
	if err != nil {
		return classify("list", dir, err)
	}
	var names []string
	for {
		batch, err := d.Readdirnames(1024)
		names = append(names, batch...)
		if err == io.EOF || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			d.Close()
			return classify("list", dir, err)
		}
		if len(names)+len(*out) > MaxListEntries {
			d.Close()
			return errTooMany(dir)
		}
	}
	d.Close()
	slices.Sort(names)
	for _, name := range names {
		child := path.Join(dir, name)
		fi, err := f.root.Lstat(rel(child))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return classify("list", child, err)
		}
		if len(*out) == MaxListEntries {
			return errTooMany(dir)
		}
		*out = append(*out, f.entry(child, fi))
		if fi.IsDir() && depth > 1 {
			if err := f.walk(child, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func errTooMany(dir string) error {
	return fmt.Errorf("list %s: more than %d entries: list less deep, or a directory further down: %w", dir, MaxListEntries, errdefs.ErrInvalidArgument)
}

// MakeDir makes the directory p with attrs a. With parents, the missing
// directories above it are made too (with a's owner and mode), and a
// directory that exists already is no error; without, its parent must
// exist (else errdefs.ErrNotFound) and p must not (else
// errdefs.ErrAlreadyExists).
func (f *FS) MakeDir(p string, a Attrs, parents bool) (*Entry, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	c, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if !parents {
		if err := f.mkdir(c, a); err != nil {
			return nil, err
		}
		return f.stat(c)
	}
	if err := f.mkdirAll(c, a); err != nil {
		return nil, err
	}
	return f.stat(c)
}

// mkdir makes directory c with attrs a.
func (f *FS) mkdir(c string, a Attrs) error {
	if c == "/" {
		return fmt.Errorf("make directory /: %w", errdefs.ErrAlreadyExists)
	}
	if err := f.root.Mkdir(rel(c), 0o700); err != nil {
		return classify("make directory", c, err)
	}
	return f.setNew(c, a, 0o755)
}

// mkdirAll makes directory c and those missing above it, with attrs a.
func (f *FS) mkdirAll(c string, a Attrs) error {
	parts := strings.Split(strings.TrimPrefix(c, "/"), "/")
	cur := "/"
	for _, part := range parts {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		fi, err := f.root.Stat(rel(cur))
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("make directory %s: %s exists and is not a directory: %w", c, cur, errdefs.ErrAlreadyExists)
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return classify("make directory", cur, err)
		}
		if err := f.mkdir(cur, a); err != nil && !errdefs.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// setNew gives new entry c its owner and mode: a's, else the defaults.
func (f *FS) setNew(c string, a Attrs, mode uint32) error {
	uid, gid := uint32(DefaultUID), uint32(DefaultGID)
	if a.UID != nil {
		uid = *a.UID
	}
	if a.GID != nil {
		gid = *a.GID
	}
	if a.Mode != nil {
		mode = *a.Mode
	}
	if err := f.root.Chown(rel(c), int(uid), int(gid)); err != nil {
		return classify("set owner of", c, err)
	}
	if err := f.root.Chmod(rel(c), fileMode(mode)); err != nil {
		return classify("set mode of", c, err)
	}
	return nil
}

// fileMode is numeric permission bits as an fs.FileMode.
func fileMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Read opens the file at p for reading. It must be a regular file: a
// directory is errdefs.ErrInvalidArgument. The caller closes it.
func (f *FS) Read(p string) (*os.File, *Entry, error) {
	c, err := Clean(p)
	if err != nil {
		return nil, nil, err
	}
	file, err := f.root.OpenFile(rel(c), os.O_RDONLY|readFlags, 0)
	if err != nil {
		return nil, nil, classify("read", c, err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, classify("read", c, err)
	}
	if !fi.Mode().IsRegular() {
		file.Close()
		return nil, nil, fmt.Errorf("read %s: not a regular file: %w", c, errdefs.ErrInvalidArgument)
	}
	e := f.entry(c, fi)
	return file, &e, nil
}

// Write writes what r yields to the file at p, making the directories
// missing above it (with the defaults). An existing file is replaced
// whole once the new content is all written (keeping its owner and mode
// unless a names them), so that a failed write, a full volume above all
// (ErrFull), leaves it as it was.
func (f *FS) Write(p string, r io.Reader, a Attrs) (*Entry, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	c, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if c == "/" {
		return nil, fmt.Errorf("write /: it is the volume's top directory: %w", errdefs.ErrInvalidArgument)
	}
	parent := path.Dir(c)
	if err := f.mkdirAll(parent, Attrs{}); err != nil {
		return nil, err
	}
	mode := uint32(0o644)
	uid, gid := uint32(DefaultUID), uint32(DefaultGID)
	if fi, err := f.root.Lstat(rel(c)); err == nil {
		if fi.IsDir() {
			return nil, fmt.Errorf("write %s: it is a directory: %w", c, errdefs.ErrInvalidArgument)
		}
		if fi.Mode().IsRegular() {
			old := f.entry(c, fi)
			mode, uid, gid = old.Mode&0o1777, old.UID, old.GID
		}
	}
	if a.Mode != nil {
		mode = *a.Mode
	}
	if a.UID != nil {
		uid = *a.UID
	}
	if a.GID != nil {
		gid = *a.GID
	}
	tmp := path.Join(parent, uploadPrefix+randomSuffix())
	file, err := f.root.OpenFile(rel(tmp), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, classify("write", c, err)
	}
	done := false
	defer func() {
		if !done {
			file.Close()
			f.root.Remove(rel(tmp))
		}
	}()
	if _, err := io.Copy(file, r); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, classify("write", c, err)
		}
		return nil, fmt.Errorf("write %s: read the upload: %w", c, err)
	}
	// Durable before it replaces what was there: a volume outlives
	// crashes.
	if err := file.Sync(); err != nil {
		return nil, classify("write", c, err)
	}
	if err := file.Chown(int(uid), int(gid)); err != nil {
		return nil, classify("write", c, err)
	}
	if err := file.Chmod(fileMode(mode)); err != nil {
		return nil, classify("write", c, err)
	}
	if err := file.Close(); err != nil {
		return nil, classify("write", c, err)
	}
	if err := f.root.Rename(rel(tmp), rel(c)); err != nil {
		return nil, classify("write", c, err)
	}
	done = true
	return f.stat(c)
}

func randomSuffix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// SetAttrs changes the owner or mode of the entry at p, as a says. A
// symbolic link's own owner changes; it has no mode of its own to change.
func (f *FS) SetAttrs(p string, a Attrs) (*Entry, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	c, err := Clean(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.root.Lstat(rel(c))
	if err != nil {
		return nil, classify("update", c, err)
	}
	uid, gid := -1, -1
	if a.UID != nil {
		uid = int(*a.UID)
	}
	if a.GID != nil {
		gid = int(*a.GID)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if a.Mode != nil {
			return nil, fmt.Errorf("update %s: a symbolic link has no mode of its own: %w", c, errdefs.ErrInvalidArgument)
		}
		if uid != -1 || gid != -1 {
			if err := f.root.Lchown(rel(c), uid, gid); err != nil {
				return nil, classify("update", c, err)
			}
		}
		return f.stat(c)
	}
	if uid != -1 || gid != -1 {
		if err := f.root.Chown(rel(c), uid, gid); err != nil {
			return nil, classify("update", c, err)
		}
	}
	if a.Mode != nil {
		if err := f.root.Chmod(rel(c), fileMode(*a.Mode)); err != nil {
			return nil, classify("update", c, err)
		}
	}
	return f.stat(c)
}

// Remove removes the entry at p, and all it holds if it is a directory.
// Symbolic links are removed, never followed. The volume's top cannot be
// removed.
func (f *FS) Remove(p string) error {
	c, err := Clean(p)
	if err != nil {
		return err
	}
	if c == "/" {
		return fmt.Errorf("remove /: the volume's top directory cannot be removed (remove what it holds, or the volume): %w", errdefs.ErrInvalidArgument)
	}
	if _, err := f.root.Lstat(rel(c)); err != nil {
		return classify("remove", c, err)
	}
	if err := f.root.RemoveAll(rel(c)); err != nil {
		return classify("remove", c, err)
	}
	return nil
}

// classify gives err, which op on clean path c met, its class.
func classify(op, c string, err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s %s: no such file or directory: %w", op, c, errdefs.ErrNotFound)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("%s %s: %w", op, c, ErrFull)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s %s: %w", op, c, errdefs.ErrAlreadyExists)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%s %s: it is a directory: %w", op, c, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%s %s: the directory is not empty: %w", op, c, errdefs.ErrFailedPrecondition)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s %s: too many symbolic links: %w", op, c, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%s %s: the volume turned read-only after an error of the host's disk: %w", op, c, errdefs.ErrUnavailable)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s %s: %w", op, c, errdefs.ErrPermissionDenied)
	case !errors.As(err, &errno):
		// No errno: os.Root's own refusal of a path that leads outside
		// the volume (a symbolic link to an absolute path, or climbing
		// above the top).
		return fmt.Errorf("%s %s: it leads outside the volume (through a symbolic link): %w", op, c, errdefs.ErrInvalidArgument)
	default:
		return fmt.Errorf("%s %s: %w", op, c, err)
	}
}
