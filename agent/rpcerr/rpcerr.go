// Package rpcerr turns the agent's errors into Connect errors: the one
// translation from errdefs classes to Connect codes that every agent
// service shares.
package rpcerr

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
)

// classes maps error classes to Connect codes, most specific first.
var classes = []struct {
	class error
	code  connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	{errdefs.ErrAlreadyExists, connect.CodeAlreadyExists},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition},
	{errdefs.ErrNotSupported, connect.CodeUnimplemented},
	{errdefs.ErrResourceExhausted, connect.CodeResourceExhausted},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied},
	{errdefs.ErrUnauthenticated, connect.CodeUnauthenticated},
	{errdefs.ErrDeadlineExceeded, connect.CodeDeadlineExceeded},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
	{context.Canceled, connect.CodeCanceled},
}

// ToConnect turns err into a *connect.Error whose code follows its class;
// errors of no known class become CodeInternal. A *connect.Error passes
// through unchanged, and nil stays nil.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return err
	}
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return connect.NewError(c.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}
