package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/filesystem/userfs"
	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// MakeDir creates a directory and its missing parents, like mkdir -p, as the
// request's user, who then owns them; where the user may not create them it
// is permission_denied. An existing directory (or a link to one) is
// already_exists, which the SDKs turn into "false: nothing created". Any
// other file at the path, or a file among the parents, is invalid_argument,
// as in envd: answering already_exists there would tell the SDK the
// directory is ready when it is not.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	var e *fspb.EntryInfo
	err = asuser.Do(u, func() (err error) {
		switch st, err := os.Stat(p); {
		case err == nil && st.IsDir():
			return fmt.Errorf("directory %s: %w", p, errdefs.ErrAlreadyExists)
		case err == nil:
			return fmt.Errorf("%s exists and is not a directory: %w", p, errdefs.ErrInvalidArgument)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := userfs.MkdirAll(p, u); err != nil {
			return err
		}
		e, err = statEntry(p)
		return err
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}
