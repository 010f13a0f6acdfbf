package filesystem

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/errdefs"
)

// codes maps errdefs classes to Connect codes. It is the service's one
// translation from error classes to the wire.
var codes = []struct {
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

// toConnect turns an error from the service's own code into a Connect error
// whose code follows the error's errdefs class; OS errors are classified
// first. Anything unclassified is internal.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	err = userfs.Classify(err)
	for _, c := range codes {
		if errors.Is(err, c.class) {
			return connect.NewError(c.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}
