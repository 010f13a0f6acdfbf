package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/lightbearco/tupper/errdefs"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// MaxWatchers bounds the polling watchers that may exist at once.
const MaxWatchers = 64

// CreateWatcher starts a polling watch, the non-streaming twin of WatchDir
// that the Python sync client uses, and returns its id. Changes made once it
// returns are buffered until GetWatcherEvents collects them; the buffer
// holds Config.MaxWatcherEvents events and drops the oldest beyond that. The
// watch lives until RemoveWatcher, or until its directory is removed.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return nil, toConnect(err)
	}
	s.mu.Lock()
	n := len(s.watchers)
	s.mu.Unlock()
	if n >= MaxWatchers {
		// Each holds an inotify instance, of which a user has 128: a
		// client that never removes its watchers must not starve WatchDir.
		return nil, toConnect(fmt.Errorf("%d polling watchers exist, the most there may be: remove unused ones with RemoveWatcher: %w", n, errdefs.ErrResourceExhausted))
	}
	w, err := startWatch(watchOptions{
		user:         u,
		path:         p,
		recursive:    req.Msg.GetRecursive(),
		includeEntry: req.Msg.GetIncludeEntry(),
		allowNetwork: req.Msg.GetAllowNetworkMounts(),
	}, s.log)
	if err != nil {
		return nil, toConnect(err)
	}
	id := uuid.NewString()
	pw := startPolling(w, s.cfg.MaxWatcherEvents, s.log)
	s.mu.Lock()
	s.watchers[id] = pw
	s.mu.Unlock()
	s.log.Debug("watcher created", "watcher", id, "path", p)
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}
