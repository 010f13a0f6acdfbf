//go:build !linux

package identity

import (
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
)

func shellOf(string) string { return "" }

// EnsureDefaultUser is unsupported outside Linux: the agent runs only in Linux sandboxes.
func EnsureDefaultUser() error {
	return fmt.Errorf("create default user: %w on this OS", errdefs.ErrNotSupported)
}
