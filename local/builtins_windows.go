package local

// The backends linked into tupper on Windows, each registering itself, as
// containerd's builtins_*.go files do.
import _ "github.com/lightbearco/tupper/backend/wsl"

// DefaultBackend is the backend a runtime uses unless told otherwise: on
// Windows, WSL 2 (one distribution per sandbox; see backend/wsl for what
// its sandboxes share).
const DefaultBackend = "wsl"
