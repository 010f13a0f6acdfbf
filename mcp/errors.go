package mcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// This file turns errors into what a tool result tells the model: what
// went wrong and what to call next. Tool handlers return these errors; the
// go-sdk makes them results with isError set.

// errSandboxNotFound is what a call on a sandbox that does not exist, or
// that belongs to another owner, answers. The two are not told apart.
func errSandboxNotFound(id string) error {
	return fmt.Errorf("sandbox %q not found: call list_sandboxes to see your sandboxes, or create_sandbox to make one", id)
}

// errArgument is a bad argument: the call must change to succeed.
func errArgument(format string, args ...any) error {
	return fmt.Errorf("invalid arguments: "+format, args...)
}

// explain words err, which op on sandbox failed with, for the model.
func explain(ctx context.Context, op, sandbox string, err error) error {
	if ctx.Err() != nil {
		// The client cancelled the call; nobody reads the answer.
		return ctx.Err()
	}
	var hint string
	switch {
	case errors.Is(err, sdk.ErrNoEndpoint), sdk.IsUnavailable(err):
		hint = "Tupper or the sandbox could not be reached: check that the sandbox still runs (list_sandboxes) and retry"
	case sdk.IsNotFound(err):
		hint = "check the path or pid (list_files shows what exists)"
	case sdk.IsAlreadyExists(err):
		hint = "it exists already"
	case sdk.IsPermissionDenied(err):
		hint = `the sandbox user may not do this: retry with user "root" if that is what you meant`
	case sdk.IsUnauthenticated(err):
		hint = `the sandbox refused the user: name one that exists in it ("user" or "root")`
	case sdk.IsInvalidArgument(err):
		hint = "fix the arguments and retry"
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		hint = "the target is in the wrong state for this"
	case sdk.IsResourceExhausted(err):
		hint = "a limit was hit (disk, memory, processes): free some and retry"
	case sdk.IsDeadlineExceeded(err):
		hint = "it ran out of time: retry with a larger timeout_seconds, or run it in the background"
	case errors.Is(err, errdefs.ErrNotSupported):
		hint = "this Tupper backend cannot do that"
	}
	msg := op
	if sandbox != "" {
		msg += " in sandbox " + fmt.Sprintf("%q", sandbox)
	}
	if hint != "" {
		hint = ": " + hint
	}
	return fmt.Errorf("%s: %w%s", msg, err, hint)
}
