package agent_test

import (
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDependencies keeps the agent, which runs inside every sandbox as a
// static binary, free of the host's side: no engine, backend, network
// plumbing, image store, API keys, server, SDK, MCP or CLI code is linked
// into it.
func TestDependencies(t *testing.T) {
	testutil.ForbidDeps(t, []string{testutil.Module + "/agent/...", testutil.Module + "/cmd/tupper-agent"}, []string{
		"engine", "backend", "network", "image", "auth", "local", "server", "sdk", "mcp", "internal/cli", "cmd/tupper",
	})
}
