package errdefs

import (
	"errors"
	"fmt"
	"time"
)

// busyError is an ErrResourceExhausted that says when to try again.
type busyError struct {
	msg   string
	after time.Duration
}

func (e *busyError) Error() string             { return e.msg }
func (e *busyError) Unwrap() error             { return ErrResourceExhausted }
func (e *busyError) RetryAfter() time.Duration { return e.after }

// Busy returns an error of class ErrResourceExhausted for a request
// refused for want of capacity that may well succeed after a wait: the
// HTTP edge answers it 429 with a Retry-After header, which the E2B SDKs
// honour. The message is formatted as by fmt.Sprintf.
func Busy(after time.Duration, format string, args ...any) error {
	return &busyError{msg: fmt.Sprintf(format, args...), after: after}
}

// RetryAfter returns how long after err, or an error it wraps, a request
// may be tried again, when it says.
func RetryAfter(err error) (time.Duration, bool) {
	var r interface{ RetryAfter() time.Duration }
	if errors.As(err, &r) {
		return r.RetryAfter(), true
	}
	return 0, false
}
