//go:build !linux

package volume

import (
	"context"
	"fmt"
	"os"

	"github.com/lightbearco/tupper/errdefs"
)

// errUnsupported answers every volume operation off Linux: a volume is a
// loop-mounted ext4 file system.
var errUnsupported = fmt.Errorf("volumes need Linux (a loop-mounted ext4 file system each): %w", errdefs.ErrNotSupported)

// Create fails off Linux.
func Create(context.Context, string, int64) error { return errUnsupported }

// Mount fails off Linux.
func Mount(context.Context, string) error { return errUnsupported }

// Mounted fails off Linux.
func Mounted(string) (bool, error) { return false, errUnsupported }

// Unmount has nothing to unmount off Linux.
func Unmount(string) error { return nil }

// Remove removes what is left of a volume off Linux: nothing was ever
// mounted there.
func Remove(dir string) error { return os.RemoveAll(dir) }

// UsageOf fails off Linux.
func UsageOf(string) (Usage, error) { return Usage{}, errUnsupported }
