package sdk_test

import (
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDependencies keeps the SDK light: programs that only drive sandboxes
// must not link the engine, a backend, the agent or the server.
func TestDependencies(t *testing.T) {
	testutil.ForbidDeps(t, []string{testutil.Module + "/sdk"}, []string{
		"engine", "backend", "image", "agent", "network", "local", "server",
	})
}
