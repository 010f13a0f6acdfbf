package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path, creating it if needed, and
// returns the function that releases it. It waits for the lock until ctx is
// done. flock locks belong to the open file, so two goroutines of one
// process exclude each other as two processes do.
//
// Lock files may be removed (Cleanup removes them when the host has no
// Tupper left): a lock taken on a file that is no longer at path, or is a
// new file there, is let go and taken again, so that two holders never
// lock two different files of one name.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	return flockPath(ctx, path, unix.LOCK_EX, true)
}

// flockPath takes a flock of kind how (unix.LOCK_EX or unix.LOCK_SH) on
// path, creating the file if needed; it waits until ctx is done when wait
// is set, else it fails at once with unix.EWOULDBLOCK when another holds a
// lock that excludes it.
func flockPath(ctx context.Context, path string, how int, wait bool) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	backoff := 500 * time.Microsecond
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			if samePathFile(f, path) {
				return func() { f.Close() }, nil
			}
			f.Close() // removed or replaced while we waited: try again
			continue
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !wait {
			return nil, fmt.Errorf("lock %s: %w", path, unix.EWOULDBLOCK)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w", path, context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// samePathFile reports whether f is still the file at path.
func samePathFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
