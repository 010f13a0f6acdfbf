package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/proto/filesystem"
)

// EventType is the kind of a filesystem event, spelled as in the E2B SDKs.
type EventType string

// The kinds of filesystem events.
const (
	EventCreate EventType = "create"
	EventWrite  EventType = "write"
	EventRemove EventType = "remove"
	EventRename EventType = "rename"
	EventChmod  EventType = "chmod"
)

// FilesystemEvent is a change under a watched directory.
type FilesystemEvent struct {
	// Name is the changed entry's path relative to the watched directory.
	Name string
	Type EventType
	// Entry describes the entry after the change, when the watch asked for
	// it (WatchOptions.IncludeEntry) and the agent provides it.
	Entry *EntryInfo
}

// WatchOptions configures Files.Watch.
type WatchOptions struct {
	// Recursive also watches the directory's subdirectories.
	Recursive bool
	// IncludeEntry asks the agent to describe each changed entry.
	IncludeEntry bool
	// User is the user the watch acts as; empty means the default user.
	User string
	// OnEvent, when set, receives the events (on one goroutine of the
	// watcher, in order) instead of the Events channel.
	OnEvent func(FilesystemEvent)
	// Timeout ends the watch after this long; zero means never.
	Timeout time.Duration
}

// Watcher delivers the events of a watched directory until Stop is called,
// its timeout is up, or the sandbox goes away. Its methods are safe for
// concurrent use.
type Watcher struct {
	events  chan FilesystemEvent
	onEvent func(FilesystemEvent)
	cancel  context.CancelFunc
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	err     error
}

// Watch starts watching the directory path and returns once the agent
// watches it, so that every change made after Watch returns is reported.
// ctx bounds only the start.
func (f *Files) Watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	sctx, cancel := streamContext(ctx, opts.Timeout)
	req := newRequest(&filesystem.WatchDirRequest{Path: path, Recursive: opts.Recursive, IncludeEntry: opts.IncludeEntry}, opts.User)
	req.Header().Set(keepaliveHeader, keepaliveInterval)
	stream, err := f.c.fs.WatchDir(sctx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %q: %w", path, fromConnect(err))
	}
	w := &Watcher{
		events:  make(chan FilesystemEvent, 128),
		onEvent: opts.OnEvent,
		cancel:  cancel,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	stop := context.AfterFunc(ctx, cancel)
	started := false
	var pending []*filesystem.FilesystemEvent
	for !started && stream.Receive() {
		switch e := stream.Msg().GetEvent().(type) {
		case *filesystem.WatchDirResponse_Start:
			started = true
		case *filesystem.WatchDirResponse_Filesystem:
			pending = append(pending, e.Filesystem)
			started = true // an agent that skips the start event
		}
	}
	if !stop() || !started {
		err := stream.Err()
		stream.Close()
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("watch %q: %w", path, fromConnect(err))
		}
		return nil, fmt.Errorf("watch %q: stream ended before the watch started: %w", path, errdefs.ErrUnavailable)
	}
	go w.run(stream, pending)
	return w, nil
}

func (w *Watcher) run(stream *connect.ServerStreamForClient[filesystem.WatchDirResponse], pending []*filesystem.FilesystemEvent) {
	defer close(w.done)
	defer close(w.events)
	defer w.cancel()
	defer stream.Close()
	for _, e := range pending {
		if !w.deliver(e) {
			return
		}
	}
	for stream.Receive() {
		if e, ok := stream.Msg().GetEvent().(*filesystem.WatchDirResponse_Filesystem); ok {
			if !w.deliver(e.Filesystem) {
				return
			}
		}
	}
	select {
	case <-w.stopped:
	default:
		if err := stream.Err(); err != nil {
			w.err = fromConnect(err)
		}
	}
}

// deliver hands one event on; it reports false when the watcher was stopped.
func (w *Watcher) deliver(e *filesystem.FilesystemEvent) bool {
	ev := FilesystemEvent{Name: e.GetName(), Type: eventType(e.GetType())}
	if e.Entry != nil {
		entry := entryInfo(e.GetEntry())
		ev.Entry = &entry
	}
	if w.onEvent != nil {
		w.onEvent(ev)
		return true
	}
	select {
	case w.events <- ev:
		return true
	case <-w.stopped:
		return false
	}
}

// Events returns the channel of events. It is closed when the watch ends.
// Without OnEvent, a consumer must drain it: a full channel holds back the
// stream.
func (w *Watcher) Events() <-chan FilesystemEvent { return w.events }

// Done returns a channel that is closed when the watch has ended.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Err returns why the watch ended on its own (nil after Stop, or while it
// runs).
func (w *Watcher) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Stop ends the watch and waits until no more events are delivered. It must
// not be called from OnEvent, which Stop waits for.
func (w *Watcher) Stop() {
	w.once.Do(func() { close(w.stopped) })
	w.cancel()
	<-w.done
}

func eventType(t filesystem.EventType) EventType {
	switch t {
	case filesystem.EventType_EVENT_TYPE_CREATE:
		return EventCreate
	case filesystem.EventType_EVENT_TYPE_WRITE:
		return EventWrite
	case filesystem.EventType_EVENT_TYPE_REMOVE:
		return EventRemove
	case filesystem.EventType_EVENT_TYPE_RENAME:
		return EventRename
	case filesystem.EventType_EVENT_TYPE_CHMOD:
		return EventChmod
	}
	return EventType("")
}
