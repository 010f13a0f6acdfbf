//go:build !linux && !darwin && !windows

package local

// DefaultBackend is the backend a runtime uses unless told otherwise; this
// OS has none yet.
const DefaultBackend = "none"
