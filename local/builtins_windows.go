package local

// The backends linked into tupper on Windows, each registering itself, as
// containerd's builtins_*.go files do.
import (
	"os"
	"path/filepath"

	_ "github.com/lightbearco/tupper/backend/wsl"
)

// DefaultBackend is the backend a runtime uses unless told otherwise: on
// Windows, WSL 2 (one distribution per sandbox; see backend/wsl for what
// its sandboxes share).
const DefaultBackend = "wsl"

// Elsewhere are the backends built for other operating systems, and what
// each needs; `tupper doctor` lists them too.
var Elsewhere = map[string]string{
	"gvisor":      "Linux",
	"runc":        "Linux 5.19 or later",
	"firecracker": "Linux with KVM",
	"apple":       "macOS 26 on Apple silicon, with Apple's container CLI 1.0 or later",
}

func defaultRoot() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "tupper")
	}
	return filepath.Join(os.TempDir(), "tupper")
}
