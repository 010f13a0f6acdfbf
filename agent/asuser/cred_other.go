//go:build !linux

package asuser

import (
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
)

// setCreds is unsupported outside Linux: the agent runs only in Linux
// sandboxes.
func setCreds(cred) error {
	return fmt.Errorf("per-thread credentials: %w on this OS", errdefs.ErrNotSupported)
}
