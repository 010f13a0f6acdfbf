package local

// The backends linked into tupper on macOS, each registering itself, as
// containerd's builtins_*.go files do.
import (
	"os"
	"path/filepath"

	_ "github.com/lightbearco/tupper/backend/apple"
)

// DefaultBackend is the backend a runtime uses unless told otherwise: on
// macOS, Apple's containers (a VM per sandbox; macOS 26 on Apple silicon,
// `container` 1.0 or later, see backend/apple).
const DefaultBackend = "apple"

// Elsewhere are the backends built for other operating systems, and what
// each needs; `tupper doctor` lists them too.
var Elsewhere = map[string]string{
	"gvisor":      "Linux",
	"runc":        "Linux 5.19 or later",
	"firecracker": "Linux with KVM",
	"wsl":         "Windows 11 with WSL 2",
}

func defaultRoot() string {
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "tupper")
	}
	return filepath.Join(os.TempDir(), "tupper")
}
