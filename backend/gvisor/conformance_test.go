//go:build linux

package gvisor_test

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/backend/gvisor"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestConformance runs the shared backend conformance suite against gVisor
// with the real agent and the Debian test image.
func TestConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root for runsc, cgroups and network namespaces")
	}
	if _, err := gvisor.FindRunsc(); err != nil {
		testutil.Skip(t, fmt.Sprintf("runsc not found: %v (set %s)", err, gvisor.RunscEnv))
	}
	if testing.Short() {
		t.Skip("short mode: the conformance suite boots gVisor sandboxes")
	}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend {
			b, err := gvisor.New(gvisor.Config{
				Root:   t.TempDir(),
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			backendtest.StopOnCleanup(t, b)
			return b
		},
		RootFS:    testutil.TestRootFS(t),
		AgentPath: testutil.AgentBinary(t),
		Crash:     func(t *testing.T, id string) { testutil.CrashSandbox(t, id) },
	})
}
