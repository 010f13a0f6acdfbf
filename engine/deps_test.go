package engine_test

import (
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDependencies keeps the engine above concrete backends and below the
// faces: it drives sandboxes through the backend package's interfaces only
// (backends register themselves; the daemon's wiring links them), and knows
// nothing of the HTTP server, the SDK, MCP, the CLI, the network plumbing or
// the agent.
func TestDependencies(t *testing.T) {
	testutil.ForbidDeps(t, []string{testutil.Module + "/engine/..."}, []string{
		"backend/", // every concrete backend, and the fake one for tests
		"network", "local", "server", "sdk", "mcp", "internal/cli", "cmd", "agent",
	})
}
