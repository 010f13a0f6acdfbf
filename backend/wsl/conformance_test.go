package wsl

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
)

// TestConformance runs the shared conformance suite against the WSL
// backend: with the real wsl.exe when TUPPER_TEST_BACKEND=wsl (on Windows
// 11 with WSL 2; `make test-backend BACKEND=wsl`), else with fakewsl, the
// stand-in, over runc. Where the real one is not run, the test says so by
// name; it is never counted as passed.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the conformance suite starts sandboxes")
	}
	useReal := os.Getenv("TUPPER_TEST_BACKEND") == "wsl"
	t.Run("wsl.exe", func(t *testing.T) {
		wslPath, err := FindWSL()
		if !useReal || runtime.GOOS != "windows" || err != nil {
			if useReal && os.Getenv("CI") != "true" {
				t.Fatalf("TUPPER_TEST_BACKEND=wsl, but this is no Windows with WSL (%s, wsl.exe: %v)", runtime.GOOS, err)
			}
			t.Skip("NOT RUN: needs Windows 11 with WSL 2 (and TUPPER_TEST_BACKEND=wsl there)")
		}
		conformanceReal(t, wslPath)
	})
	t.Run("fakewsl", func(t *testing.T) {
		if useReal {
			t.Skip("TUPPER_TEST_BACKEND=wsl: the real wsl.exe only")
		}
		conformanceStandIn(t)
	})
}

// conformanceReal runs the suite against the real WSL. Windows cannot make
// the Debian test image (testutil needs mmdebstrap), so the image and the
// agent come from the environment: TUPPER_WSL_TEST_ROOTFS, a Linux root
// unpacked where Windows can read it, and TUPPER_AGENT, the static
// linux/amd64 agent (make dist builds it).
func conformanceReal(t *testing.T, wslPath string) {
	rootfs, agent := os.Getenv("TUPPER_WSL_TEST_ROOTFS"), os.Getenv("TUPPER_AGENT")
	if rootfs == "" || agent == "" {
		t.Fatal("set TUPPER_WSL_TEST_ROOTFS (an unpacked Linux test image) and TUPPER_AGENT (the linux/amd64 tupper-agent)")
	}
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend {
			b, err := New(Config{
				WSLPath: wslPath,
				Root:    t.TempDir(),
				// Apart from the distributions of a tupper serve on
				// this account.
				Prefix: "tuppertest-",
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopAll(t, b) })
			return b
		},
		RootFS:    rootfs,
		AgentPath: agent,
	})
}

// stopAll stops every sandbox b holds.
func stopAll(t *testing.T, b backend.Backend) {
	ctx := context.Background()
	ids, err := b.List(ctx)
	if err != nil {
		t.Error(err)
	}
	for _, id := range ids {
		if err := b.Stop(ctx, id); err != nil {
			t.Errorf("cleanup: Stop(%s): %v", id, err)
		}
	}
}
