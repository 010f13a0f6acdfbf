package process

import (
	"sync"
	"time"

	pb "github.com/lightbearco/tupper/proto/process"
)

// Fan-out of a process's output to the streams that follow it.
//
// Every subscriber has a queue of subscriberQueue events (at most
// subscriberQueue × chunkSize bytes). When a queue is full the output
// reader waits, which in turn stops draining the process's pipe and so
// slows the process down, the way a slow terminal would; no output is lost
// while every follower keeps up within that bound.
//
// The Start stream's subscriber is lossless: it receives every byte for as
// long as its stream is open, however slow its client is, because the SDK's
// run() result is built from it. Any other subscriber (a Connect stream)
// that leaves its queue full for slowSubscriberTimeout is dropped: its
// stream ends with resource_exhausted instead of stalling the process and
// the other followers indefinitely. A subscriber whose stream goes away
// unsubscribes, which releases a reader waiting on it at once.
const subscriberQueue = 64

// slowSubscriberTimeout is how long a lossy subscriber may leave the output
// reader waiting before it is dropped. A variable so tests can shorten it.
var slowSubscriberTimeout = 5 * time.Second

// subscriber is one stream following a process.
type subscriber struct {
	ch       chan *pb.ProcessEvent // data events; the end is read from handle.done
	lossless bool

	gone     chan struct{} // closed by unsubscribe: nobody reads ch any more
	dropped  chan struct{} // closed when the fan-out gave up on this subscriber
	goneOnce sync.Once
	dropOnce sync.Once
}

func newSubscriber(lossless bool) *subscriber {
	return &subscriber{
		ch:       make(chan *pb.ProcessEvent, subscriberQueue),
		lossless: lossless,
		gone:     make(chan struct{}),
		dropped:  make(chan struct{}),
	}
}

// subscribe adds sub to h's followers. It reports false when the process
// has ended already; sub then sees only the end through h.done.
func (h *handle) subscribe(sub *subscriber) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end != nil {
		return false
	}
	h.subs[sub] = struct{}{}
	return true
}

// unsubscribe removes sub and releases any reader waiting to give it data.
func (h *handle) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	delete(h.subs, sub)
	h.mu.Unlock()
	sub.goneOnce.Do(func() { close(sub.gone) })
}

// drop gives up on a lossy subscriber that fell behind.
func (h *handle) drop(sub *subscriber) {
	h.mu.Lock()
	delete(h.subs, sub)
	h.mu.Unlock()
	sub.dropOnce.Do(func() { close(sub.dropped) })
	h.log.Warn("dropped a follower that fell behind the output")
}

// broadcast hands ev to every current subscriber, waiting as described
// above. Output readers call it; it never holds h.mu while waiting.
func (h *handle) broadcast(ev *pb.ProcessEvent) {
	h.mu.Lock()
	subs := make([]*subscriber, 0, len(h.subs))
	for sub := range h.subs {
		subs = append(subs, sub)
	}
	h.mu.Unlock()
	for _, sub := range subs {
		deliver(h, sub, ev)
	}
}

func deliver(h *handle, sub *subscriber, ev *pb.ProcessEvent) {
	select {
	case sub.ch <- ev:
		return
	default:
	}
	if sub.lossless {
		select {
		case sub.ch <- ev:
		case <-sub.gone:
		}
		return
	}
	t := time.NewTimer(slowSubscriberTimeout)
	defer t.Stop()
	select {
	case sub.ch <- ev:
	case <-sub.gone:
	case <-t.C:
		h.drop(sub)
	}
}
