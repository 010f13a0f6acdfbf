package process

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// StreamInput is SendInput as a client stream: a start message naming the
// process, then data messages written in order; keepalives are ignored.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	if err := s.streamInput(ctx, stream); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (s *Service) streamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) error {
	var h *handle
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			if h != nil {
				return fmt.Errorf("input stream started twice: %w", errdefs.ErrInvalidArgument)
			}
			var err error
			if h, err = s.lookup(ev.Start.GetProcess()); err != nil {
				return err
			}
		case *pb.StreamInputRequest_Data:
			if h == nil {
				return fmt.Errorf("input stream must start with a start message naming the process: %w", errdefs.ErrInvalidArgument)
			}
			if err := h.write(ctx, ev.Data.GetInput()); err != nil {
				return err
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return fmt.Errorf("input stream message has no event: %w", errdefs.ErrInvalidArgument)
		}
	}
	return stream.Err()
}
