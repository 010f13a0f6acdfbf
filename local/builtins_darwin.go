package local

// The backends linked into tupper on macOS, each registering itself, as
// containerd's builtins_*.go files do.
import _ "github.com/lightbearco/tupper/backend/apple"

// DefaultBackend is the backend a runtime uses unless told otherwise: on
// macOS, Apple's containers (a VM per sandbox; macOS 26 on Apple silicon,
// `container` 1.0 or later, see backend/apple).
const DefaultBackend = "apple"
