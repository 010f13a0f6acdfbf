package process

import (
	"context"
	"fmt"
	"syscall"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// SendSignal sends SIGTERM or SIGKILL to a process's group; the process's
// followers then see its end.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	h, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, toConnect(fmt.Errorf("signal %v: want SIGTERM or SIGKILL: %w", req.Msg.GetSignal(), errdefs.ErrInvalidArgument))
	}
	if err := h.signal(sig); err != nil {
		return nil, toConnect(err)
	}
	h.log.Info("signal sent", "op", "signal", "signal", sig.String())
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}
