package userfs

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/lightbearco/tupper/errdefs"
)

// classes lists every errdefs class, so Classify can tell an error that is
// already classified from one that is not.
var classes = []error{
	errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalidArgument,
	errdefs.ErrFailedPrecondition, errdefs.ErrNotSupported, errdefs.ErrResourceExhausted,
	errdefs.ErrUnavailable, errdefs.ErrPermissionDenied, errdefs.ErrUnauthenticated,
	errdefs.ErrDeadlineExceeded,
}

// Classify returns err marked with the errdefs class its operating-system
// cause belongs to, keeping err's message and chain: errors.Is(result, err's
// causes) still holds. An error that already carries a class, or whose cause
// fits none, is returned unchanged, and so is nil.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return err
		}
	}
	if class := classOf(err); class != nil {
		return &classified{err: err, class: class}
	}
	return err
}

func classOf(err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.ErrNotFound
	case errors.Is(err, fs.ErrExist):
		return errdefs.ErrAlreadyExists
	case errors.Is(err, fs.ErrPermission):
		return errdefs.ErrPermissionDenied
	case !errors.As(err, &errno):
		return nil
	}
	switch errno {
	case syscall.ENOTEMPTY:
		return errdefs.ErrAlreadyExists
	case syscall.ENOSPC, syscall.EDQUOT:
		return errdefs.ErrResourceExhausted
	case syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EINVAL:
		return errdefs.ErrInvalidArgument
	case syscall.EROFS:
		return errdefs.ErrPermissionDenied
	case syscall.EXDEV:
		// rename(2) cannot cross filesystems; the caller must copy instead.
		return errdefs.ErrFailedPrecondition
	}
	return nil
}

// classified is an OS error tagged with an errdefs class. Its message is the
// OS error's alone, so wire messages read like "open /x: no space left on
// device" rather than repeating the class name.
type classified struct {
	err, class error
}

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.class} }

// IsDiskFull reports whether err means the disk or the user's quota is full.
func IsDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
