//go:build !linux

package asuser

import (
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
)

// The agent runs only in Linux sandboxes; elsewhere no thread switches.

var errUnsupported = fmt.Errorf("per-thread credentials: %w on this OS", errdefs.ErrNotSupported)

func current() (cred, error) { return cred{}, errUnsupported }
func become(cred) error      { return errUnsupported }
func restore(cred) error     { return errUnsupported }
