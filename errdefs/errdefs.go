// Package errdefs holds the error classes shared by every layer of Tupper.
//
// Code wraps one of these with %w and the subject it concerns, for example
//
//	fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
//
// and checks for it with errors.Is. Each edge (the agent's Connect handlers,
// the HTTP server, the SDK) maps classes to wire codes in exactly one place;
// no code matches error strings.
package errdefs

import "errors"

var (
	// ErrNotFound means the named thing (sandbox, process, path, image) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists means a thing to be created exists already.
	ErrAlreadyExists = errors.New("already exists")
	// ErrInvalidArgument means the request itself is wrong and retrying it will not help.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition means the request is well formed but the target is in the
	// wrong state for it (a directory where a file is expected, a sandbox not running).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrNotSupported means the backend or platform lacks the ability asked for.
	ErrNotSupported = errors.New("not supported")
	// ErrResourceExhausted means a limit was hit: disk full, too many sandboxes.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrUnavailable means a dependency (a sandbox's agent, a runtime) cannot be reached now.
	ErrUnavailable = errors.New("unavailable")
	// ErrPermissionDenied means the caller may not do this.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnauthenticated means the caller did not prove who it is.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrDeadlineExceeded means an operation ran out of time.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsAlreadyExists reports whether err is of class ErrAlreadyExists.
func IsAlreadyExists(err error) bool { return errors.Is(err, ErrAlreadyExists) }

// IsNotSupported reports whether err is of class ErrNotSupported.
func IsNotSupported(err error) bool { return errors.Is(err, ErrNotSupported) }
