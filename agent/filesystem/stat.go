package filesystem

import (
	"context"

	"connectrpc.com/connect"

	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// Stat describes one path without following a symbolic link at its end. A
// missing path is not_found.
func (s *Service) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	_, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	e, err := statEntry(p)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}
