package filesystem

import (
	"context"
	"os"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/asuser"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// Remove deletes a file, a symbolic link (not its target) or a whole
// directory tree, as the request's user: what the user may not delete is
// permission_denied (a tree may then be partly gone, as with rm -r). A missing path is not_found, so a client can tell "removed"
// from "was never there".
func (s *Service) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	err = asuser.Do(u, func() error {
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		return os.RemoveAll(p)
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}
