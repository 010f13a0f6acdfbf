package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// RemoveWatcher stops a polling watcher and discards its buffered events.
// An unknown id is not_found.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	w, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, toConnect(fmt.Errorf("watcher %q: %w", id, errdefs.ErrNotFound))
	}
	w.stop()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}

// forget drops watcher id if it is still w and stops it.
func (s *Service) forget(id string, w *pollWatcher) {
	s.mu.Lock()
	if s.watchers[id] == w {
		delete(s.watchers, id)
	}
	s.mu.Unlock()
	w.stop()
}
