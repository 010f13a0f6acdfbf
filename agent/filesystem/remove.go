package filesystem

import (
	"context"
	"os"

	"connectrpc.com/connect"

	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// Remove deletes a file, a symbolic link (not its target) or a whole
// directory tree. A missing path is not_found, so a client can tell "removed"
// from "was never there".
func (s *Service) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	_, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	if _, err := os.Lstat(p); err != nil {
		return nil, toConnect(err)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}
