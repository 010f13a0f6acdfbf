//go:build !linux

package localsock

// DefaultRoot is empty where `tupper serve` has no local socket: only on
// Linux does it learn its peers' credentials.
const DefaultRoot = ""

// DefaultPath is empty where `tupper serve` has no local socket.
const DefaultPath = ""

func pathOf(string) string { return "" }
