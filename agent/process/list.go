package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// List returns the running processes the service started, by pid, with
// their configuration and tag.
func (s *Service) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	res := &pb.ListResponse{}
	for _, h := range s.running() {
		res.Processes = append(res.Processes, h.info())
	}
	return connect.NewResponse(res), nil
}
