package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// MakeDir creates a directory and its missing parents, like mkdir -p, all
// owned by the request's user. An existing directory (or a link to one) is
// already_exists, which the SDKs turn into "false: nothing created". Any
// other file at the path, or a file among the parents, is invalid_argument,
// as in envd: answering already_exists there would tell the SDK the
// directory is ready when it is not.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	switch st, err := os.Stat(p); {
	case err == nil && st.IsDir():
		return nil, toConnect(fmt.Errorf("directory %s: %w", p, errdefs.ErrAlreadyExists))
	case err == nil:
		return nil, toConnect(fmt.Errorf("%s exists and is not a directory: %w", p, errdefs.ErrInvalidArgument))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, toConnect(err)
	}
	if err := userfs.MkdirAll(p, u); err != nil {
		return nil, toConnect(err)
	}
	e, err := statEntry(p)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}
