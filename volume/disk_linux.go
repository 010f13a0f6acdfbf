package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// mountMu orders the mounts and unmounts of every volume of the process:
// whether a directory is mounted is the host's state, not one store's.
var mountMu sync.Mutex

// Create makes a volume of size bytes in dir, which must not exist (its
// parent must), and mounts it. A failed Create leaves no dir behind.
func Create(ctx context.Context, dir string, size int64) (retErr error) {
	if size < MinSize {
		return fmt.Errorf("volume size %d is below the %d MiB an ext4 file system needs", size, MinSize>>20)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			if err := Remove(dir); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("clean up: %w", err))
			}
		}
	}()
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
		return fmt.Errorf("volume disk file: %w", err)
	}
	// A journal, unlike a sandbox's throwaway disk: a volume outlives
	// crashes. No reserved blocks: the size is what its users get. The
	// file is sparse and reads as zeros, so the inode tables and the
	// journal need no zeroing now.
	mkfs := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "tupper-volume", img)
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s (install e2fsprogs)", img, err, out)
	}
	if err := os.Mkdir(filepath.Join(dir, mountDir), 0o700); err != nil {
		return err
	}
	if err := Mount(ctx, dir); err != nil {
		return err
	}
	// Everyone may write at the top: E2B's images run commands as
	// "user", and the runc backend's sandboxes are host users of their
	// own, none of whom owns the directory.
	data := DataDir(dir)
	if err := os.Mkdir(data, 0o777); err != nil {
		return err
	}
	if err := os.Chown(data, DefaultUID, DefaultGID); err != nil {
		return err
	}
	return os.Chmod(data, 0o777)
}

// Mount mounts the volume in dir unless it is mounted already.
func Mount(ctx context.Context, dir string) error {
	mountMu.Lock()
	defer mountMu.Unlock()
	mnt := filepath.Join(dir, mountDir)
	mounted, err := isMounted(mnt)
	if err != nil || mounted {
		return err
	}
	// errors=remount-ro: the file is sparse, so a host disk that fills
	// under it fails writes the volume had room for; its file system then
	// turns read-only rather than lose more.
	cmd := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,errors=remount-ro", filepath.Join(dir, diskFile), mnt)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mount volume %s: %w: %s", dir, err, out)
	}
	return nil
}

// Mounted reports whether the volume in dir is mounted.
func Mounted(dir string) (bool, error) {
	return isMounted(filepath.Join(dir, mountDir))
}

// isMounted reports whether something is mounted at mnt: a mount point
// sits on another device than its parent.
func isMounted(mnt string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(mnt, &st); err != nil {
		return false, fmt.Errorf("volume mount point: %w", err)
	}
	if err := unix.Lstat(filepath.Dir(mnt), &parent); err != nil {
		return false, fmt.Errorf("volume directory: %w", err)
	}
	return st.Dev != parent.Dev, nil
}

// Unmount unmounts the volume in dir, if it is mounted. Its loop device
// goes with it (mount's autoclear). A file system still busy (a sandbox
// that is going away still holds it) is detached: it goes once unused.
func Unmount(dir string) error {
	mountMu.Lock()
	defer mountMu.Unlock()
	mnt := filepath.Join(dir, mountDir)
	for try := 0; ; try++ {
		mounted, err := isMounted(mnt)
		if errors.Is(err, os.ErrNotExist) || err == nil && !mounted {
			return nil
		}
		if err != nil {
			return err
		}
		err = unix.Unmount(mnt, 0)
		switch {
		case err == nil || errors.Is(err, unix.EINVAL):
			continue // not a mount point (any more): look again
		case errors.Is(err, unix.EBUSY) && try < 10:
			time.Sleep(50 * time.Millisecond)
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount volume %s: %w", dir, err)
			}
		default:
			return fmt.Errorf("unmount volume %s: %w", dir, err)
		}
	}
}

// Remove unmounts the volume in dir and removes it, content and all. A
// missing dir is no error.
func Remove(dir string) error {
	if err := Unmount(dir); err != nil {
		return err
	}
	// Never through a mount: whatever is still mounted stays.
	if mounted, err := Mounted(dir); err == nil && mounted {
		return fmt.Errorf("remove volume %s: it is still mounted", dir)
	}
	return os.RemoveAll(dir)
}

// UsageOf reports how much of the mounted volume in dir is taken.
func UsageOf(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(DataDir(dir), &st); err != nil {
		return Usage{}, fmt.Errorf("volume usage: %w", err)
	}
	bs := int64(st.Bsize)
	return Usage{Size: int64(st.Blocks) * bs, Used: int64(st.Blocks-st.Bfree) * bs, Free: int64(st.Bavail) * bs}, nil
}
