package filesystem

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// DefaultKeepaliveInterval is how often WatchDir sends a keepalive event when
// the client's Keepalive-Ping-Interval header does not say.
const DefaultKeepaliveInterval = 50 * time.Second

// WatchDir streams the changes under a directory: first a start event, sent
// once the watch is in place so that anything the client does after seeing
// it is reported; then one filesystem event per change, named relative to the
// watched directory; and keepalive events at the pace of the
// Keepalive-Ping-Interval header (seconds), so proxies do not close an idle
// stream. With recursive set, subdirectories are watched too, including
// those created later.
//
// A missing path is not_found, a file invalid_argument, and a directory the
// request's user may not read permission_denied. The stream ends
// when the client goes away, or with not_found when the watched directory
// itself is removed.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	u, p, err := s.resolve(req, req.Msg.GetPath())
	if err != nil {
		return toConnect(err)
	}
	w, err := startWatch(watchOptions{
		user:         u,
		path:         p,
		recursive:    req.Msg.GetRecursive(),
		includeEntry: req.Msg.GetIncludeEntry(),
		allowNetwork: req.Msg.GetAllowNetworkMounts(),
	}, s.log)
	if err != nil {
		return toConnect(err)
	}
	defer w.close()

	// Send is not safe for concurrent use, and keepalives come from their
	// own goroutine.
	var mu sync.Mutex
	send := func(r *fspb.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(r)
	}
	if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(keepaliveInterval(req.Header()))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
					cancel()
					return
				}
			}
		}
	})
	err = w.run(ctx, func(e *fspb.FilesystemEvent) error {
		return send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e}})
	})
	cancel()
	wg.Wait()
	return toConnect(err)
}

// keepaliveInterval reads the Keepalive-Ping-Interval header the SDKs send
// (whole seconds), falling back to DefaultKeepaliveInterval.
func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultKeepaliveInterval
}
