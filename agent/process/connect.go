package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// Connect re-attaches to a running process by pid or tag: start{pid}, then
// the output produced from now on, then end. Several streams may follow
// one process; a follower that falls far behind is dropped (see fanout.go).
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	return toConnect(s.connect(ctx, req, stream))
}

func (s *Service) connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	h, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := newSubscriber(false)
	h.subscribe(sub) // when the process has just ended, sub sees only the end
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	if err := send(startEvent(h.pid)); err != nil {
		h.unsubscribe(sub)
		return err
	}
	return follow(ctx, h, sub, keepaliveInterval(req.Header()), send)
}
