//go:build !linux

package wsl

import "testing"

// conformanceStandIn needs Linux: fakewsl runs its distributions with runc.
func conformanceStandIn(t *testing.T) {
	t.Skip("fakewsl, the stand-in for wsl.exe, runs on Linux only")
}
