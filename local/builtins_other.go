//go:build !linux && !darwin && !windows

package local

import (
	"os"
	"path/filepath"
)

// DefaultBackend is the backend a runtime uses unless told otherwise; this
// OS has none yet.
const DefaultBackend = "none"

// Elsewhere are the backends built for other operating systems, and what
// each needs; `tupper doctor` lists them too.
var Elsewhere = map[string]string{
	"gvisor":      "Linux",
	"runc":        "Linux 5.19 or later",
	"firecracker": "Linux with KVM",
	"apple":       "macOS 26 on Apple silicon, with Apple's container CLI 1.0 or later",
	"wsl":         "Windows 11 with WSL 2",
}

func defaultRoot() string {
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "tupper")
	}
	return filepath.Join(os.TempDir(), "tupper")
}
