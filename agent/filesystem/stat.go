package filesystem

import (
	"context"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/asuser"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// Stat describes one path without following a symbolic link at its end, as
// the request's user sees it. A missing path is not_found, and a path in a
// directory the user may not search permission_denied.
func (s *Service) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	var e *fspb.EntryInfo
	err = asuser.Do(u, func() (err error) {
		e, err = statEntry(p)
		return err
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}
