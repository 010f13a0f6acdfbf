//go:build !linux

package image

import "os"

// removeTree deletes path and everything under it.
func removeTree(path string) error { return os.RemoveAll(path) }
