package process

import (
	"context"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/agent/identity"
	pb "github.com/lightbearco/tupper/proto/process"
)

// Start runs a command and streams its events: start{pid}, data as output
// arrives, then end. The process outlives this stream; only the request's
// deadline (Connect-Timeout-Ms), when it has one, ends the process with it,
// as in envd. A client that merely goes away leaves the process running,
// to be found again with Connect.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	return toConnect(s.start(ctx, req, stream))
}

func (s *Service) start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u, err := identity.FromHeader(req.Header(), s.cfg.DefaultUser)
	if err != nil {
		return err
	}
	c, err := s.resolve(u, req.Msg)
	if err != nil {
		return err
	}
	sub := newSubscriber(true)
	h, err := s.spawn(c, req.Msg, sub)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		h.killAt(dl)
	}
	h.log.Info("process started", "op", "start", "user", u.Name, "cmd", c.path, "args", len(c.argv)-1, "tag", req.Msg.GetTag(), "pty", c.pty != nil)

	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	if err := send(startEvent(h.pid)); err != nil {
		h.unsubscribe(sub)
		return err
	}
	return follow(ctx, h, sub, keepaliveInterval(req.Header()), send)
}
