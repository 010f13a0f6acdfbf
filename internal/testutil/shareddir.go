package testutil

import (
	"os"
	"testing"
)

// SharedTempDir returns a new directory, removed when the test ends, that
// every user of the host may reach and write (mode 0777, owned by the test's
// user), for tests that act as other users. t.TempDir does not do: its
// directories sit in a parent only their creator may enter.
func SharedTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tupper-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}
