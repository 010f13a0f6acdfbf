package image

import (
	"io/fs"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// canUnpack says whether this host can unpack images (see
// Config.BlobsOnly).
const canUnpack = true

// treeSize adds up the sizes of the files under dir, counting each hard-linked
// file once.
func treeSize(dir string) (int64, error) {
	var size int64
	inodes := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			if inodes[st.Ino] {
				return nil
			}
			inodes[st.Ino] = true
		}
		size += info.Size()
		return nil
	})
	return size, err
}

// syncFS flushes the filesystem that holds dir to disk.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
