package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// Update resizes a PTY process's terminal. A request without a size
// changes nothing.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	h, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if req.Msg.GetPty() != nil {
		if err := h.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, toConnect(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
