//go:build !unix

package apple

import "io/fs"

// identity finds no hard links where the OS does not say which files
// share an inode: each name becomes a file of its own.
func identity(fs.FileInfo) (fileID, bool) { return fileID{}, false }
