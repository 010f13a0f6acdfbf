package process

import (
	"context"
	"syscall"

	"github.com/lightbearco/tupper/agent/identity"
	pb "github.com/lightbearco/tupper/proto/process"
)

// Launch starts req as the user named user (empty: the service's default
// user), as a Start call would, for the agent itself rather than for a
// client: the process is listed, and Connect, SendInput and SendSignal
// reach it by its pid or its tag like any other. No deadline ends it.
//
// Its events after the start (output as it comes, then its end) go to
// events, in order, from one goroutine. events must return promptly: the
// process's output waits for it, as it would for a slow client.
func (s *Service) Launch(user string, req *pb.StartRequest, events func(*pb.ProcessEvent)) (pid uint32, err error) {
	h, sub, err := s.launch(user, req, false)
	if err != nil {
		return 0, err
	}
	h.log.Info("process started", "op", "launch", "user", cmdUser(user, s.cfg.DefaultUser), "cmd", req.GetProcess().GetCmd(), "tag", req.GetTag())
	go follow(context.Background(), h, sub, defaultKeepalive, func(ev *pb.ProcessEvent) error {
		if ev.GetKeepalive() == nil {
			events(ev)
		}
		return nil
	})
	return h.pid, nil
}

// Run runs req as the user named user (empty: the service's default user)
// to its end, for the agent's own checks: unlisted, so that no client sees
// or reaches it. It returns the process's end and the last maxOutput bytes
// of its output (stdout and stderr as they came). When ctx ends first, the
// process's group is killed, and Run returns once it has ended, with ctx's
// error beside its end.
func (s *Service) Run(ctx context.Context, user string, req *pb.StartRequest, maxOutput int) (*pb.ProcessEvent_EndEvent, []byte, error) {
	h, sub, err := s.launch(user, req, true)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = h.signal(syscall.SIGKILL) })
	defer stop()
	var (
		out []byte
		end *pb.ProcessEvent_EndEvent
	)
	// The stream's own context never ends: follow returns with the end.
	_ = follow(context.Background(), h, sub, defaultKeepalive, func(ev *pb.ProcessEvent) error {
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			out = append(out, d.GetStdout()...)
			out = append(out, d.GetStderr()...)
			out = append(out, d.GetPty()...)
			if len(out) > maxOutput {
				out = append(out[:0], out[len(out)-maxOutput:]...)
			}
		case ev.GetEnd() != nil:
			end = ev.GetEnd()
		}
		return nil
	})
	return end, out, ctx.Err()
}

// launch resolves and spawns req as the user named user (empty: the
// default user), followed losslessly by the subscriber it returns.
func (s *Service) launch(user string, req *pb.StartRequest, unlisted bool) (*handle, *subscriber, error) {
	u, err := identity.Lookup(cmdUser(user, s.cfg.DefaultUser))
	if err != nil {
		return nil, nil, err
	}
	c, err := s.resolve(u, req)
	if err != nil {
		return nil, nil, err
	}
	c.unlisted = unlisted
	sub := newSubscriber(true)
	h, err := s.spawn(c, req, sub)
	if err != nil {
		return nil, nil, err
	}
	return h, sub, nil
}

func cmdUser(user, def string) string {
	if user == "" {
		return def
	}
	return user
}
