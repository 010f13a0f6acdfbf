package localsock

import "path/filepath"

// DefaultRoot is the state root of a `tupper serve` given no other; it is
// package local's DefaultRoot on Linux.
const DefaultRoot = "/var/lib/tupper"

// DefaultPath is the socket of DefaultRoot.
const DefaultPath = "/run/tupper.sock"

// runDir holds the sockets of the other roots.
const runDir = "/run"

func pathOf(root string) string {
	if filepath.Clean(root) == DefaultRoot {
		return DefaultPath
	}
	return hashedPath(runDir, root)
}
