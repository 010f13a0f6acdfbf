// Package testutil holds helpers shared by Tupper's tests: skips for missing
// privileges, test binaries and test images.
package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Skip skips the test with reason, or fails it when TUPPER_REQUIRE_ALL is
// set: CI installs everything, so in CI a test that would skip for a
// missing runtime is a broken set-up, not a pass.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("TUPPER_REQUIRE_ALL") != "" {
		t.Fatalf("cannot run: %s (TUPPER_REQUIRE_ALL is set, so this is a failure)", reason)
	}
	t.Skip(reason)
}

// RequiresRoot skips the test unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root: run the tests as root (CI does)")
	}
}

// RequiresRunsc skips the test unless it runs as root with runsc installed,
// and returns runsc's path.
func RequiresRunsc(t testing.TB) string {
	t.Helper()
	RequiresRoot(t)
	if p := os.Getenv("TUPPER_RUNSC"); p != "" {
		return p
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		Skip(t, "runsc is not installed: run scripts/setup.sh")
	}
	return p
}
