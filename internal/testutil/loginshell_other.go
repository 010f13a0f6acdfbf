//go:build !linux

package testutil

// HermeticLoginShells does nothing outside Linux (no mount namespaces): the
// tests that run the agent's shells are Linux-only.
func HermeticLoginShells() (code int, parent bool) { return 0, false }
