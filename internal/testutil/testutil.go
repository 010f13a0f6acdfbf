// Package testutil holds helpers shared by Tupper's tests: skips for missing
// privileges, test binaries and test images.
package testutil

import (
	"os"
	"testing"
)

// RequiresRoot skips the test unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: run the tests as root (CI does)")
	}
}
