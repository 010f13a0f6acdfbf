package apple

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
)

// testBackendEnv selects the real platform: `make test-backend
// BACKEND=apple` sets it.
const testBackendEnv = "TUPPER_TEST_BACKEND"

// TestConformance runs the shared conformance suite against the apple
// backend: real/ with Apple's `container` on this Mac when
// TUPPER_TEST_BACKEND=apple, standin/ otherwise, with the stand-in CLI
// over runc sandboxes (Linux, root; see conformance_linux_test.go).
// noDiskCap is why the disk check cannot pass on Apple's containers.
const noDiskCap = "Apple's container has no per-container disk cap"

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the conformance suite boots sandboxes")
	}
	t.Run("real", testConformanceReal)
	t.Run("standin", func(t *testing.T) {
		if os.Getenv(testBackendEnv) == "apple" {
			t.Skip(testBackendEnv + "=apple: real/ runs the suite against Apple's container instead")
		}
		testConformanceStandin(t)
	})
}

// testConformanceReal runs the suite against Apple's `container`. The
// image is TUPPER_TEST_ROOTFS, an unpacked linux/arm64 root with bash,
// coreutils and python3 (the test image of internal/testutil, built on an
// arm64 Linux machine, or any such root), or on Linux the test image.
func testConformanceReal(t *testing.T) {
	if os.Getenv(testBackendEnv) != "apple" {
		t.Skip("NOT RUN: needs macOS 26 with Apple's container CLI ≥ 1.0 (on such a Mac: make test-backend BACKEND=apple, or " + testBackendEnv + "=apple go test -run TestConformance/real ./backend/apple/)")
	}
	for _, f := range checkHost(context.Background(), DefaultCLI, thisHost()) {
		if !f.OK && !f.Optional {
			t.Fatalf("%s=apple, but %s: %s (%s)", testBackendEnv, f.What, f.Detail, f.Fix)
		}
	}
	root := realRootFS(t)
	backendtest.Run(t, backendtest.Config{
		NewBackend: func(t *testing.T) backend.Backend {
			b, err := New(Config{Root: t.TempDir(), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stopAll(t, b) })
			return b
		},
		RootFS:    root,
		AgentPath: agentBinary(t, DefaultArch),
		NoDiskCap: noDiskCap,
		// A container killed from outside, as a crash of its VM would
		// end it.
		Crash: func(t *testing.T, id string) {
			if out, err := exec.Command(DefaultCLI, "kill", id).CombinedOutput(); err != nil {
				t.Fatalf("container kill %s: %v: %s", id, err, out)
			}
		},
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
