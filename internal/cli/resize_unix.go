//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// watchResize reports the terminal's changes of size (SIGWINCH) until stop.
func watchResize() (resized <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGWINCH)
	return c, func() { signal.Stop(c) }
}
