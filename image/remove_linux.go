package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// removeTree deletes path and everything under it. It never follows a
// symlink and never descends into another mount: a tree left behind by a
// crashed tool may still have something mounted in it, and the host's files
// under such a mount must survive.
func removeTree(path string) error {
	dfd, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	defer unix.Close(dfd)
	mnt, err := mountID(dfd)
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if err := removeAllAt(dfd, filepath.Base(path), mnt); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// removeAllAt deletes name in the directory dirfd, recursively, staying on the
// mount mnt.
func removeAllAt(dirfd int, name string, mnt uint64) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return fmt.Errorf("%s: %w", name, err)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	m, err := mountID(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("%s: %w", name, err)
	}
	if m != mnt {
		unix.Close(fd)
		return fmt.Errorf("%s: something is mounted there: unmount it, then retry", name)
	}
	names, err := readDirNames(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("%s: %w", name, err)
	}
	var first error
	for _, n := range names {
		if err := removeAllAt(fd, n, mnt); err != nil && first == nil {
			first = fmt.Errorf("%s/%w", name, err)
		}
	}
	unix.Close(fd)
	if first != nil {
		return first
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// mountID identifies the mount fd is on. It falls back to the device number
// on kernels without STATX_MNT_ID (before 5.8), which still catches mounts of
// other filesystems.
func mountID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		return stx.Mnt_id, nil
	}
	return unix.Mkdev(stx.Dev_major, stx.Dev_minor), nil
}

// readDirNames lists the directory open at fd, leaving fd open.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	// The duplicate shares fd's offset; start from the top whatever it was.
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}
