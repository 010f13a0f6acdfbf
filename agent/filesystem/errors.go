package filesystem

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/agent/rpcerr"
)

// toConnect turns an error from the service's own code into a Connect error
// whose code follows the error's errdefs class; OS errors are classified
// first. Anything unclassified is internal.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return err
	}
	return rpcerr.ToConnect(userfs.Classify(err))
}
