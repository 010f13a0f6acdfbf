package local

// The backends linked into tupper on Linux, each registering itself, as
// containerd's builtins_*.go files do.
import (
	_ "github.com/lightbearco/tupper/backend/firecracker"
	_ "github.com/lightbearco/tupper/backend/gvisor"
	_ "github.com/lightbearco/tupper/backend/runc"
)

// DefaultBackend is the backend a runtime uses unless told otherwise: the
// one this host runs best.
const DefaultBackend = "gvisor"

// Elsewhere are the backends built for other operating systems, and what
// each needs; `tupper doctor` lists them too.
var Elsewhere = map[string]string{
	"apple": "macOS 26 on Apple silicon, with Apple's container CLI 1.0 or later",
	"wsl":   "Windows 11 with WSL 2",
}

func defaultRoot() string { return "/var/lib/tupper" }
