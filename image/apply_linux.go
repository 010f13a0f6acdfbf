package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/errdefs"
)

const (
	whiteoutPrefix = ".wh."
	// whiteoutMeta starts names that aufs used for its own bookkeeping; they
	// are not part of any image.
	whiteoutMeta = ".wh..wh."
	// whiteoutOpaque in a directory hides everything lower layers put there.
	whiteoutOpaque = ".wh..wh..opq"
	// typeRegA is the pre-POSIX type flag of a regular file.
	typeRegA = '\x00'
)

// copyBufs holds buffers for copying file contents out of layers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// applier applies one layer (a tar stream) onto a root filesystem directory.
//
// Every path is resolved by openat2 with RESOLVE_IN_ROOT, so symlinks met on
// the way are followed as if the directory were "/", as the sandbox will see
// them: "var/run/x" under a "var/run -> /run" link lands in the root's run/,
// and no symlink or ".." can lead outside the root. A symlink to a directory
// that does not exist gets that directory made, inside the root, as
// containerd does. Entry names that climb out with ".." are refused outright,
// as are hard links that point outside. The final component of a path is
// never followed: an entry replaces what is there (a directory merges into a
// directory).
type applier struct {
	ctx      context.Context
	root     int    // the root filesystem directory
	rootPath string // its path, as the kernel names it in /proc/self/fd
	mnt      uint64 // its mount, which deletions never leave
	asRoot   bool   // whether ownership can be set
	log      *slog.Logger

	// seen holds every path this layer wrote and their parents: whiteouts
	// hide only what lower layers made.
	seen map[string]bool
	// dirTimes are applied after the last entry, deepest last-written first,
	// because creating entries in a directory changes its times.
	dirTimes []pathTimes
	devices  int // device nodes skipped
	xattrs   int // extended attributes skipped
}

type pathTimes struct {
	name string
	ts   []unix.Timespec
}

// applyLayer applies the layer tar stream r onto the directory rootDir.
func applyLayer(ctx context.Context, rootDir string, r io.Reader, log *slog.Logger) error {
	fd, err := unix.Open(rootDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open root filesystem %s: %w", rootDir, err)
	}
	defer unix.Close(fd)
	mnt, err := mountID(fd)
	if err != nil {
		return fmt.Errorf("root filesystem %s: %w", rootDir, err)
	}
	// The kernel's name for it, with any symlinks above it resolved, to
	// compare with the names it gives other descriptors.
	rootPath, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("root filesystem %s: %w", rootDir, err)
	}
	a := &applier{
		ctx:      ctx,
		root:     fd,
		rootPath: rootPath,
		mnt:      mnt,
		asRoot:   os.Geteuid() == 0,
		log:      log,
		seen:     map[string]bool{},
	}
	tr := tar.NewReader(r)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return badLayer(ctx, err)
		}
		if i%128 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := a.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	if err := a.finish(); err != nil {
		return err
	}
	if a.devices > 0 {
		log.Debug("skipped device nodes: sandboxes get their /dev from the runtime", "count", a.devices)
	}
	if a.xattrs > 0 {
		log.Debug("skipped extended attributes outside user.* and security.capability", "count", a.xattrs)
	}
	return nil
}

// badLayer describes a failure to read the layer stream itself.
func badLayer(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("read layer: %w: the layer is not a valid tar archive: %w", err, errdefs.ErrInvalidArgument)
}

// readErrRecorder remembers a read error, to tell a broken layer from a
// failing disk when a copy fails.
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (r *readErrRecorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

func (a *applier) markSeen(p string) {
	for p != "" && !a.seen[p] {
		a.seen[p] = true
		p, _ = splitPath(p)
	}
}

func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanPath(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return a.rootDir(hdr)
		}
		return nil
	}
	dir, base := splitPath(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(dir, base)
	}

	var target string
	switch hdr.Typeflag {
	case tar.TypeReg, typeRegA, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeFifo:
	case tar.TypeLink:
		if target, err = cleanPath(hdr.Linkname); err != nil {
			return fmt.Errorf("hard link: %w", err)
		}
		if target == "" || target == name {
			return fmt.Errorf("hard link to %q: not a file: %w", hdr.Linkname, errdefs.ErrInvalidArgument)
		}
	case tar.TypeChar, tar.TypeBlock:
		// A host device node in a rootfs shared by sandboxes is a way out of
		// weaker runtimes; every runtime gives the sandbox its own /dev.
		a.devices++
		return nil
	default:
		a.log.Debug("skipped tar entry of unknown type", "entry", hdr.Name, "type", string(hdr.Typeflag))
		return nil
	}

	parent, err := a.openDir(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(parent)

	var st unix.Stat_t
	err = unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		if hdr.Typeflag != tar.TypeDir || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAllAt(parent, base, a.mnt); err != nil {
				return fmt.Errorf("replace existing entry: %w", err)
			}
		}
	case !errors.Is(err, unix.ENOENT):
		return err
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		err = a.dir(parent, base, name, hdr)
	case tar.TypeSymlink:
		err = a.symlink(parent, base, hdr)
	case tar.TypeLink:
		err = a.hardlink(parent, base, target)
	case tar.TypeFifo:
		err = a.fifo(parent, base, hdr)
	default:
		err = a.file(parent, base, hdr, r)
	}
	if err != nil {
		return err
	}
	a.markSeen(name)
	return nil
}

// openDir opens the directory dir (relative to the root, symlinks resolved
// inside it), creating missing directories on the way when create is set.
func (a *applier) openDir(dir string, create bool) (int, error) {
	return a.openDirDepth(dir, create, 0)
}

// maxSymlinkDepth bounds how many dangling symlinks openDir follows to make
// their targets, as the kernel bounds symlink resolution.
const maxSymlinkDepth = 40

func (a *applier) openDirDepth(dir string, create bool, depth int) (int, error) {
	p := dir
	if p == "" {
		p = "."
	}
	fd, err := openat2InRoot(a.root, p)
	if err == nil || !create || dir == "" || !errors.Is(err, unix.ENOENT) {
		if errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%q is not a directory: %w", dir, err)
		}
		return fd, err
	}
	pdir, base := splitPath(dir)
	pfd, err := a.openDirDepth(pdir, true, depth)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	err = unix.Mkdirat(pfd, base, 0o755)
	switch {
	case err == nil:
		// Undo the umask; a directory made on the way is root's, 0755.
		var dfd int
		if dfd, err = unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			err = unix.Fchmod(dfd, 0o755)
			unix.Close(dfd)
		}
	case errors.Is(err, unix.EEXIST):
		// A symlink to a directory that does not exist (yet): make its
		// target inside the root, as containerd does.
		target, lerr := readlinkat(pfd, base)
		if lerr != nil {
			break // something else is there; the open below says what
		}
		if depth >= maxSymlinkDepth {
			return -1, fmt.Errorf("directory %q: too many levels of symlinks: %w", dir, unix.ELOOP)
		}
		resolved, rerr := a.resolveLink(pfd, target)
		if rerr != nil {
			return -1, fmt.Errorf("directory %q: %w", dir, rerr)
		}
		tfd, terr := a.openDirDepth(resolved, true, depth+1)
		if terr != nil {
			return -1, terr
		}
		unix.Close(tfd)
		err = nil
	}
	if err != nil {
		return -1, fmt.Errorf("create directory %q: %w", dir, err)
	}
	fd, err = openat2InRoot(a.root, p)
	if err != nil {
		return -1, fmt.Errorf("open directory %q: %w", dir, err)
	}
	return fd, nil
}

// resolveLink returns, relative to the root, where a symlink with target
// found in the directory dirfd points, with ".." stopping at the root.
func (a *applier) resolveLink(dirfd int, target string) (string, error) {
	if strings.HasPrefix(target, "/") {
		return clampPath(target), nil
	}
	// Where dirfd is, after the symlinks that led to it.
	where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dirfd))
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(where, a.rootPath)
	if !ok || (rel != "" && rel[0] != '/') {
		return "", fmt.Errorf("directory %s is outside the root %s", where, a.rootPath)
	}
	return clampPath(rel + "/" + target), nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openat2InRoot opens the directory p below root with symlinks resolved as
// if root were "/".
func openat2InRoot(root int, p string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(root, p, &how)
		// EAGAIN: a concurrent rename made the kernel give up; nothing
		// renames inside a root being unpacked, but retry a few times anyway.
		if (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && i < 16 {
			continue
		}
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("openat2: %w: unpacking images needs Linux 5.6 or newer", errdefs.ErrNotSupported)
		}
		return fd, err
	}
}

func (a *applier) file(parent int, base string, hdr *tar.Header, r io.Reader) error {
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	bp := copyBufs.Get().(*[]byte)
	rr := &readErrRecorder{r: r}
	_, err = io.CopyBuffer(f, rr, *bp)
	copyBufs.Put(bp)
	if rr.err != nil {
		return badLayer(a.ctx, rr.err)
	}
	if err != nil {
		return fmt.Errorf("write file: %w", err)
	}
	if err := a.ownAndMode(fd, hdr); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return a.setTimes(parent, base, hdr)
}

func (a *applier) dir(parent int, base, name string, hdr *tar.Header) error {
	if err := unix.Mkdirat(parent, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := a.ownAndMode(fd, hdr); err != nil {
		return err
	}
	a.dirTimes = append(a.dirTimes, pathTimes{name: name, ts: timespecs(hdr)})
	return nil
}

func (a *applier) rootDir(hdr *tar.Header) error {
	if err := a.ownAndMode(a.root, hdr); err != nil {
		return err
	}
	a.dirTimes = append(a.dirTimes, pathTimes{name: "", ts: timespecs(hdr)})
	return nil
}

func (a *applier) symlink(parent int, base string, hdr *tar.Header) error {
	if hdr.Linkname == "" {
		return fmt.Errorf("symlink with an empty target: %w", errdefs.ErrInvalidArgument)
	}
	if err := unix.Symlinkat(hdr.Linkname, parent, base); err != nil {
		return err
	}
	if a.asRoot {
		if err := unix.Fchownat(parent, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	return a.setTimes(parent, base, hdr)
}

func (a *applier) hardlink(parent int, base, target string) error {
	tdir, tbase := splitPath(target)
	tfd, err := a.openDir(tdir, false)
	if err == nil {
		defer unix.Close(tfd)
		err = unix.Linkat(tfd, tbase, parent, base, 0)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("hard link to %q: no such file in the image: %w", target, errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("hard link to %q: not a file: %w", target, errdefs.ErrInvalidArgument)
	case err != nil:
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	// A hard link shares the target's metadata; the header has nothing else.
	return nil
}

func (a *applier) fifo(parent int, base string, hdr *tar.Header) error {
	if err := unix.Mknodat(parent, base, unix.S_IFIFO|0o600, 0); err != nil {
		return err
	}
	if a.asRoot {
		if err := unix.Fchownat(parent, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	// We just made it and nothing else writes here, so following is safe.
	if err := unix.Fchmodat(parent, base, uint32(hdr.Mode)&0o7777, 0); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return a.setTimes(parent, base, hdr)
}

// ownAndMode sets owner, mode and extended attributes of an open file or
// directory, in that order: chown clears set-user-ID bits and capabilities.
func (a *applier) ownAndMode(fd int, hdr *tar.Header) error {
	if a.asRoot {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode)&0o7777); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		// Keep what programs need (file capabilities, user data). Other
		// namespaces change how the host treats the file: trusted.overlay.*
		// steers overlayfs, security.* labels steer LSMs.
		if !strings.HasPrefix(attr, "user.") && attr != "security.capability" {
			a.xattrs++
			continue
		}
		if err := unix.Fsetxattr(fd, attr, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) || (!a.asRoot && errors.Is(err, unix.EPERM)) {
				a.xattrs++
				continue
			}
			return fmt.Errorf("set extended attribute %s: %w", attr, err)
		}
	}
	return nil
}

func (a *applier) setTimes(parent int, base string, hdr *tar.Header) error {
	if err := unix.UtimesNanoAt(parent, base, timespecs(hdr), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

func timespecs(hdr *tar.Header) []unix.Timespec {
	m := hdr.ModTime
	at := hdr.AccessTime
	if at.IsZero() {
		at = m
	}
	return []unix.Timespec{timespec(at), timespec(m)}
}

func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		return unix.Timespec{}
	}
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

// whiteout applies a whiteout entry: ".wh.name" deletes name, and
// ".wh..wh..opq" deletes everything in its directory, but only what lower
// layers made.
func (a *applier) whiteout(dir, base string) error {
	parent, err := a.openDir(dir, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil // nothing below to hide
	}
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if base == whiteoutOpaque {
		return a.prune(parent, dir)
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil
	}
	victim := strings.TrimPrefix(base, whiteoutPrefix)
	if victim == "" || victim == "." || victim == ".." {
		return fmt.Errorf("invalid whiteout: %w", errdefs.ErrInvalidArgument)
	}
	if a.seen[joinPath(dir, victim)] {
		return nil
	}
	return removeAllAt(parent, victim, a.mnt)
}

// prune deletes from the directory fd (at path dir) everything this layer did
// not write, descending into directories it did.
func (a *applier) prune(fd int, dir string) error {
	names, err := readDirNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := joinPath(dir, n)
		if !a.seen[p] {
			if err := removeAllAt(fd, n, a.mnt); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue
		}
		if err != nil {
			return err
		}
		err = a.prune(cfd, p)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// finish sets the times of the directories this layer wrote, now that
// nothing more is created in them.
func (a *applier) finish() error {
	for i := len(a.dirTimes) - 1; i >= 0; i-- {
		d := a.dirTimes[i]
		if d.name == "" {
			if err := unix.UtimesNanoAt(a.root, ".", d.ts, 0); err != nil {
				return fmt.Errorf("set times of the root: %w", err)
			}
			continue
		}
		dir, base := splitPath(d.name)
		parent, err := a.openDir(dir, false)
		if err != nil {
			continue // deleted again by a later entry
		}
		var st unix.Stat_t
		if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.UtimesNanoAt(parent, base, d.ts, unix.AT_SYMLINK_NOFOLLOW)
			if err != nil {
				unix.Close(parent)
				return fmt.Errorf("set times of %q: %w", d.name, err)
			}
		}
		unix.Close(parent)
	}
	return nil
}
