package firecracker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReleaseOf(t *testing.T) {
	for line, want := range map[string][2]int{
		"Firecracker v1.16.1":          {1, 16},
		"Jailer v1.7.0":                {1, 7},
		"Firecracker v1.8.0-dev (x86)": {1, 8},
	} {
		major, minor, ok := releaseOf(line)
		if !ok || major != want[0] || minor != want[1] {
			t.Errorf("releaseOf(%q) = %d.%d, %v; want %d.%d", line, major, minor, ok, want[0], want[1])
		}
	}
	if _, _, ok := releaseOf("firecracker (built from source)"); ok {
		t.Error("a line without a release gave one")
	}
}

// TestOldFirecrackerRefused: doctor fails a Firecracker older than 1.8,
// whose guests Debian's kernel cannot find devices in, and says so.
func TestOldFirecrackerRefused(t *testing.T) {
	for version, ok := range map[string]bool{"Firecracker v1.7.0": false, "Firecracker v1.8.0": true, "Firecracker v1.16.1": true} {
		bin := filepath.Join(t.TempDir(), "firecracker")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		f := binaryFinding(context.Background(), "firecracker", func() (string, error) { return bin, nil }, FirecrackerEnv)
		if f.OK != ok || (!ok && !strings.Contains(f.Fix, "1.8 or later")) {
			t.Errorf("%s: %+v; want OK %v", version, f, ok)
		}
	}
}
