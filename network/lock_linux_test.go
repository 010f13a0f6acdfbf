package network

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLockFileRemovedUnderWaiter checks that a lock file may be removed
// while another waits for it (HostCleanup removes them): the waiter ends
// up holding the file at the path, which a third locker then finds
// locked, rather than a deleted file that nobody else can see.
func TestLockFileRemovedUnderWaiter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := lockFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		unlock, err := lockFile(ctx, path)
		if err != nil {
			t.Error(err)
			got <- func() {}
			return
		}
		got <- unlock
	}()
	time.Sleep(50 * time.Millisecond) // the second waits on the first's file
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	first()
	second := <-got
	defer second()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the waiter holds no file at %s: %v", path, err)
	}
	if third, err := flockPath(ctx, path, unix.LOCK_EX, false); !errors.Is(err, unix.EWOULDBLOCK) {
		if third != nil {
			third()
		}
		t.Fatalf("a third locker got %v, want the waiter's lock to exclude it", err)
	}
}
