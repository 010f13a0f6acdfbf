package engine

import (
	"errors"
	"fmt"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lightbearco/tupper/errdefs"
)

// Disk caps of sandboxes, in MB (MiB): what a sandbox may write to its file
// system, its root and /tmp together. A cap is not a reservation: the host
// needs the space only as sandboxes fill it.
const (
	// DefaultDiskMB is Config.DefaultDiskMB's zero value.
	DefaultDiskMB = 10 << 10
	// DefaultMaxDiskMB is Config.MaxDiskMB's zero value, unless
	// DefaultDiskMB is larger.
	DefaultMaxDiskMB = 100 << 10
	// MinDiskMB is the smallest cap: a sandbox's first writes (its
	// resolver, hosts and trust store, the user's home) must fit.
	MinDiskMB = 32
)

// minHostFreeBytes is the free space a create needs on the disk of the
// engine's state: below it, the create is refused at once rather than
// failing halfway through (a record, a bundle, runsc's state).
const minHostFreeBytes = 64 << 20

// validateDisk fills the disk defaults of c and checks them. A maximum
// below DefaultDiskMB, with no default given, is the default too.
func (c *Config) validateDisk() error {
	if c.DefaultDiskMB == 0 {
		c.DefaultDiskMB = DefaultDiskMB
		if c.MaxDiskMB != 0 {
			c.DefaultDiskMB = min(DefaultDiskMB, c.MaxDiskMB)
		}
	}
	if c.MaxDiskMB == 0 {
		c.MaxDiskMB = max(DefaultMaxDiskMB, c.DefaultDiskMB)
	}
	switch {
	case c.DefaultDiskMB < MinDiskMB || c.MaxDiskMB < MinDiskMB:
		return fmt.Errorf("engine: disk sizes of %d MB (default, tupper serve --disk) and %d MB (maximum, --max-disk): neither may be below the %d MB a sandbox needs: %w",
			c.DefaultDiskMB, c.MaxDiskMB, MinDiskMB, errdefs.ErrInvalidArgument)
	case c.DefaultDiskMB > c.MaxDiskMB:
		return fmt.Errorf("engine: the default disk size, %d MB (tupper serve --disk), is above the maximum, %d MB (--max-disk): %w",
			c.DefaultDiskMB, c.MaxDiskMB, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateDisk checks the disk cap a create asks for against cfg's.
func (o *CreateOptions) validateDisk(cfg *Config) error {
	switch {
	case o.DiskMB < 0:
		return fmt.Errorf("create: disk %d MB is negative: %w", o.DiskMB, errdefs.ErrInvalidArgument)
	case o.DiskMB != 0 && o.DiskMB < MinDiskMB:
		return fmt.Errorf("create: disk %d MB is below the %d MB a sandbox needs: %w", o.DiskMB, MinDiskMB, errdefs.ErrInvalidArgument)
	case o.DiskMB > cfg.MaxDiskMB:
		return fmt.Errorf("create: disk %d MB is above this server's maximum of %d MB: ask for less, or start the server with a larger --max-disk: %w",
			o.DiskMB, cfg.MaxDiskMB, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkHostDisk fails with errdefs.ErrUnavailable when the disk of the
// engine's state has too little free space for a create.
func (e *Engine) checkHostDisk() error {
	free, err := freeBytes(e.cfg.Root)
	if err != nil {
		// Not knowing is no reason to refuse: the create's own writes
		// will tell.
		return nil
	}
	if free < minHostFreeBytes {
		return errHostDiskFull(e.cfg.Root, fmt.Errorf("%d MiB free, below the %d MiB a create needs", free>>20, minHostFreeBytes>>20))
	}
	return nil
}

// explainDiskFull returns err as an errHostDiskFull when it says that the
// disk of the engine's state (or the backend's, which is on the same disk in
// a usual set-up) is full, and err itself otherwise.
func (e *Engine) explainDiskFull(err error) error {
	if hostDiskFull(err) {
		return errHostDiskFull(e.cfg.Root, err)
	}
	return err
}

// errHostDiskFull is the error of a create that the host's full disk
// refused: it names the disk and says what to do.
func errHostDiskFull(root string, cause error) error {
	return fmt.Errorf("the host's disk is full (the disk of %s: %w): free space on it and retry: %w", root, cause, errdefs.ErrUnavailable)
}

// hostDiskFull reports whether err is a write that a full disk or quota
// refused: ENOSPC or EDQUOT from the file system, SQLITE_FULL from the store.
func hostDiskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}
