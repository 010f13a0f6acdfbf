package runc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend/internal/oci"
)

// A sandbox's root has three parts, each mounted in its bundle:
//
//   - lower/: the shared image, through an idmapped mount that shows the
//     image's host uid u as the sandbox's host uid base+u, so that root
//     inside owns what root owns in the image. The image itself stays as
//     it is, owned by host root, and is never written.
//   - disk/: an ext4 file system of its own, on a sparse file disk.img of
//     the disk cap, loop-mounted nosuid and nodev: it holds the overlay's
//     upper and work dirs, so everything the sandbox writes, /tmp
//     included, is capped, and a write past the cap fails with ENOSPC.
//   - the overlay of lower/ and disk/, runc's root, at <RunDir>/<root>/<id>
//     (see Backend.rootPath): runc's init runs as the sandbox's root, a
//     stranger on the host, and must walk to the root it pivots into,
//     while the bundle stays root's alone.
const (
	lowerDir = "lower"
	diskFile = "disk.img"
	diskDir  = "disk"
)

// idRange is the range of host uids and gids a sandbox's ids 0–65535 map
// onto: the n-th /30 block of the network pool (unique on the host while
// the sandbox holds it) owns [idBase + n·65536, idBase + (n+1)·65536). So
// no two sandboxes share an id on the host, and none shares one with a
// host user, whose ids sit far below idBase.
const (
	idBase  = 1 << 28
	idCount = 1 << 16
)

// usernsHolder is a process in a new user namespace with a sandbox's id
// mapping: its namespace is what the idmapped mount maps through. It
// exists only while the mount is made.
type usernsHolder struct {
	cmd *exec.Cmd
	fd  int
}

// newUserns starts a process in a user namespace that maps 0–65535 onto
// hostBase. The process is `sleep`, which waits on a pipe's end that is
// never written; close kills it.
func newUserns(hostBase uint32) (*usernsHolder, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, fmt.Errorf("user namespace: no sleep on PATH to hold it: %w", err)
	}
	cmd := exec.Command(sleep, "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(hostBase), Size: idCount}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(hostBase), Size: idCount}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return &usernsHolder{cmd: cmd, fd: fd}, nil
}

func (u *usernsHolder) close() {
	unix.Close(u.fd)
	u.cmd.Process.Kill()
	u.cmd.Wait()
}

// mountLower mounts image at <dir>/lower through an idmapped mount that
// maps host ids 0–65535 to hostBase and up.
func mountLower(image, dir string, hostBase uint32) error {
	target := filepath.Join(dir, lowerDir)
	if err := os.Mkdir(target, 0o755); err != nil {
		return err
	}
	ns, err := newUserns(hostBase)
	if err != nil {
		return err
	}
	defer ns.close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, image, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", image, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns.fd),
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("idmap the image %s: %w (the host's kernel and file system must support idmapped mounts: Linux 5.19 or later on ext4, xfs or btrfs)", image, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the idmapped image at %s: %w", target, err)
	}
	return nil
}

// makeDisk makes the sandbox's writable layer: a sparse ext4 file of size
// bytes at <dir>/disk.img, loop-mounted at <dir>/disk with the overlay's
// upper and work dirs in it, the upper owned as the image's root is but
// mapped into the sandbox's range.
func makeDisk(ctx context.Context, image, dir string, size int64, hostBase uint32) error {
	img := filepath.Join(dir, diskFile)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk file: %w", err)
	}
	// No journal (the layer dies with the sandbox), no reserved blocks,
	// lazy inode tables: a 10 GiB file system is made in milliseconds.
	mkfs := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,nodiscard", "-L", "tupper", img)
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s (install e2fsprogs)", img, err, out)
	}
	mnt := filepath.Join(dir, diskDir)
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	// errors=remount-ro: the file is sparse, so a host disk that fills
	// under it fails the sandbox's writes (I/O errors) after they were
	// taken; the file system then turns read-only rather than lose more.
	mount := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,errors=remount-ro", img, mnt)
	if out, err := mount.CombinedOutput(); err != nil {
		return fmt.Errorf("mount %s: %w: %s", img, err, out)
	}
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return err
	}
	upper, work := filepath.Join(mnt, "upper"), filepath.Join(mnt, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(mnt, "lost+found")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := unix.Chown(upper, int(hostBase+st.Uid), int(hostBase+st.Gid)); err != nil {
		return err
	}
	return unix.Chmod(upper, st.Mode&0o7777)
}

// mountRoot mounts the overlay of <dir>/lower and <dir>/disk at target,
// in a directory of its own (target's parent) that only the sandbox's
// host root, hostBase, may enter: runc's init, which runs as that uid,
// walks through it, and no other host user reaches the sandbox's files.
func mountRoot(dir, target string, hostBase uint32) error {
	guard := filepath.Dir(target)
	if err := os.Mkdir(guard, 0o700); err != nil {
		return err
	}
	if err := os.Chown(guard, int(hostBase), int(hostBase)); err != nil {
		return err
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		return err
	}
	opts := "lowerdir=" + filepath.Join(dir, lowerDir) +
		",upperdir=" + filepath.Join(dir, diskDir, "upper") +
		",workdir=" + filepath.Join(dir, diskDir, "work")
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the root overlay: %w", err)
	}
	return nil
}

// unmountAll undoes the mounts of the sandbox whose bundle is dir and root
// is root, top first: the root overlay (and its mount point), the disk (the
// loop device goes with it, autoclear), the image, the log.
func unmountAll(dir, root string) error {
	var errs []error
	if err := oci.UnmountAll(root); err != nil {
		errs = append(errs, err)
	} else {
		for _, d := range []string{root, filepath.Dir(root)} {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range []string{diskDir, lowerDir, oci.LogDir} {
		if err := oci.UnmountAll(filepath.Join(dir, d)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// makeRunDir makes dir and its parents traversable by anyone: it makes
// the missing ones 0711 (listable by root alone) and adds the search bits
// to those that exist, taking nothing away from any (a parent may be
// /tmp, 1777).
func makeRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if mode := fi.Mode(); mode.Perm()&0o111 != 0o111 {
			keep := mode.Perm() | mode&(os.ModeSticky|os.ModeSetgid|os.ModeSetuid)
			if err := os.Chmod(d, keep|0o111); err != nil {
				return err
			}
		}
		if d == "/" {
			return nil
		}
	}
}
