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
