//go:build !linux

package apple

import (
	"os"
	"testing"
)

func testConformanceStandin(t *testing.T) {
	t.Skip("the stand-in runs its sandboxes with runc, on Linux only")
}

// realRootFS is TUPPER_TEST_ROOTFS: internal/testutil, which builds the
// test image with mmdebstrap, does not build on macOS.
func realRootFS(t *testing.T) string {
	root := os.Getenv("TUPPER_TEST_ROOTFS")
	if root == "" {
		t.Fatal("set TUPPER_TEST_ROOTFS to an unpacked linux/arm64 root with bash, coreutils, procps and python3, such as the test image that internal/testutil builds on an arm64 Linux machine (the RootFS of tupper-test/debian in ~/.cache/tupper/testimages/store)")
	}
	return root
}
