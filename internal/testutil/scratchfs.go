package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ScratchFS mounts a file system of its own, of size bytes, for the test
// (see MountScratchFS) in a temporary directory and returns its path.
func ScratchFS(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	MountScratchFS(t, dir, size)
	return dir
}

// MountScratchFS mounts a file system of its own, of size bytes, at the
// empty directory dir: an ext4 file system on a loop device when the host
// can make one, else a tmpfs. It is the test's alone, so its free space
// moves only with what the test does there (the host's disk is shared with
// other tests), and the test may fill it. It is unmounted when the test
// ends; the test must stop what still uses it before then (cleanups
// registered later run first).
func MountScratchFS(t testing.TB, dir string, size int64) {
	t.Helper()
	RequiresRoot(t)
	base := t.TempDir()
	if err := mountExt4(base, dir, size); err != nil {
		t.Logf("no loop ext4 (%v): using a tmpfs", err)
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
			Skip(t, fmt.Sprintf("cannot mount a scratch file system: %v", err))
		}
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount scratch file system %s: %v (detaching it)", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
}

// mountExt4 makes an ext4 file system of size bytes in a sparse file under
// base and mounts it at dir through a loop device that goes with the
// unmount (mount's autoclear).
func mountExt4(base, dir string, size int64) error {
	img := filepath.Join(base, "fs.img")
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return err
	}
	// No blocks reserved for root: the free space seen is all there is.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount -o loop: %w: %s", err, out)
	}
	return nil
}

// FreeBytes returns the space available to unprivileged writers on the
// file system of dir.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
