//go:build !unix

package cli

import "os"

// watchResize reports nothing where there is no SIGWINCH (Windows): the
// remote terminal keeps the size it started with.
func watchResize() (resized <-chan os.Signal, stop func()) {
	return nil, func() {}
}
