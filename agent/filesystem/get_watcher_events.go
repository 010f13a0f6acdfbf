package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// GetWatcherEvents returns, and forgets, the events a polling watcher has
// buffered since the last call; an empty list means nothing changed. An
// unknown id is not_found. When the watched directory was removed, the
// remaining events come first, then the watcher is gone and the call fails
// with not_found.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	w, ok := s.watchers[id]
	s.mu.Unlock()
	if !ok {
		return nil, toConnect(fmt.Errorf("watcher %q: %w", id, errdefs.ErrNotFound))
	}
	events, dropped, err := w.drain()
	if err != nil {
		s.forget(id, w)
		return nil, toConnect(err)
	}
	if dropped > 0 {
		s.log.Warn("watcher buffer overflowed; oldest events dropped", "watcher", id, "dropped", dropped)
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}
