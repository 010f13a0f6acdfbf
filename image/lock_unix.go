//go:build unix

package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is an advisory lock (flock) on a file. Locks taken through separate
// calls conflict with each other even inside one process, so the same lock
// files order goroutines and processes alike.
type fileLock struct{ f *os.File }

// lockFile takes a shared or exclusive lock on path, creating the file if
// needed, and waits for it until ctx is done.
func lockFile(ctx context.Context, path string, exclusive bool) (*fileLock, error) {
	delay := 2 * time.Millisecond
	for {
		l, ok, err := tryLockFile(path, exclusive)
		if err != nil || ok {
			return l, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// tryLockFile takes the lock if nobody holds a conflicting one and reports
// whether it did.
func tryLockFile(path string, exclusive bool) (*fileLock, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open lock file: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return &fileLock{f: f}, true, nil
}

// release drops the lock. It is safe on a nil lock.
func (l *fileLock) release() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the only descriptor drops the flock
		l.f = nil
	}
}
