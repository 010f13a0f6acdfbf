package wsl

import (
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/internal/testutil"
)

// conformanceStandIn runs the suite against the backend driving fakewsl,
// with the real agent and the Debian test image. The crash it checks is
// the agent's own: killed inside, it ends the wsl that runs it.
func conformanceStandIn(t *testing.T) {
	requireRunc(t)
	s := newStandIn(t)
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend { return newTestBackend(t, Config{}) },
		RootFS:     testutil.TestRootFS(t),
		AgentPath:  testutil.AgentBinary(t),
		Crash:      crashStandIn(s, DefaultPrefix),
	})
	t.Cleanup(func() {
		if d := s.distros(t); len(d) > 0 {
			t.Errorf("distributions left after the suite: %q", d)
		}
	})
}
