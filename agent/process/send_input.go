package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// SendInput writes bytes to a process's stdin pipe or PTY. It returns once
// the bytes are in the pipe or terminal buffer, which may wait while the
// process does not read.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	h, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := h.write(ctx, req.Msg.GetInput()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}
