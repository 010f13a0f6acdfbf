package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// CloseStdin closes a process's stdin pipe so it reads end-of-file.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	h, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := h.closeStdin(); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}
