//go:build unix

package apple

import (
	"io/fs"
	"syscall"
)

// identity returns the inode of a file with more than one name.
func identity(info fs.FileInfo) (fileID, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true
}
