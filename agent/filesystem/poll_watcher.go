package filesystem

import (
	"context"
	"log/slog"
	"sync"

	fspb "github.com/lightbearco/tupper/proto/filesystem"
)

// pollWatcher runs a dirWatcher in the background and buffers its events
// until a client collects them with GetWatcherEvents. It is safe for
// concurrent use.
type pollWatcher struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the watcher's goroutine has ended
	max    int

	mu      sync.Mutex
	events  []*fspb.FilesystemEvent
	dropped int   // events dropped since the last drain
	err     error // why the watch ended on its own, once it has
}

// startPolling starts w in the background. The watcher lives until stop is
// called or its directory goes away, independent of any request's context.
func startPolling(w *dirWatcher, max int, log *slog.Logger) *pollWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pollWatcher{cancel: cancel, done: make(chan struct{}), max: max}
	go func() {
		defer close(p.done)
		defer w.close()
		err := w.run(ctx, p.record)
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
	}()
	return p
}

// record buffers e. When the buffer is full the oldest event goes: a client
// that polls too slowly learns of the latest changes, which tell it the
// current state, rather than of stale ones. The loss is logged on the next
// drain, since the wire has no field for it.
func (p *pollWatcher) record(e *fspb.FilesystemEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) >= p.max {
		p.events[0] = nil
		p.events = p.events[1:]
		p.dropped++
	}
	p.events = append(p.events, e)
	return nil
}

// drain returns the buffered events and how many were dropped since the last
// drain. Once the buffer is empty and the watch has ended on its own, it
// returns the reason instead.
func (p *pollWatcher) drain() (events []*fspb.FilesystemEvent, dropped int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) == 0 && p.err != nil {
		return nil, 0, p.err
	}
	events, dropped = p.events, p.dropped
	p.events, p.dropped = nil, 0
	return events, dropped, nil
}

// stop ends the watch and waits for its goroutine.
func (p *pollWatcher) stop() {
	p.cancel()
	<-p.done
}
