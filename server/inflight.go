package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Data-plane requests end when their sandbox does. A dead sandbox's network
// vanishes without a FIN or an RST from its side (its network stack dies
// with it, then its veth is deleted), so the proxy's connection to it
// would wait minutes for TCP keepalives, and the client with it: a
// commands.run whose sandbox timed out, or an isRunning that raced a kill,
// would hang until the client gave up. The proxy registers every request
// here; a sweeper, running only while requests are in flight, cancels
// those whose sandbox the engine no longer runs.

// errSandboxGone is the cause of a request context canceled because its
// sandbox stopped running.
var errSandboxGone = errors.New("the sandbox stopped running")

// sweepInterval is how often in-flight requests are checked against the
// running sandboxes.
const sweepInterval = 500 * time.Millisecond

// inflight tracks the data-plane requests in flight, by sandbox. It is safe
// for concurrent use.
type inflight struct {
	// running returns the ids of the running sandboxes, sorted.
	running  func() []string
	interval time.Duration

	mu       sync.Mutex
	bySB     map[string]*inflightSet
	sweeping bool
}

type inflightSet struct {
	cancels map[*context.CancelCauseFunc]struct{}
}

func newInflight(running func() []string, interval time.Duration) *inflight {
	return &inflight{running: running, interval: interval, bySB: map[string]*inflightSet{}}
}

// track returns a context for a request to sandbox id, canceled with cause
// errSandboxGone once the sandbox no longer runs, and the function to call
// when the request is over.
func (f *inflight) track(parent context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	key := &cancel
	f.mu.Lock()
	set := f.bySB[id]
	if set == nil {
		set = &inflightSet{cancels: map[*context.CancelCauseFunc]struct{}{}}
		f.bySB[id] = set
	}
	set.cancels[key] = struct{}{}
	if !f.sweeping {
		f.sweeping = true
		go f.sweep()
	}
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(set.cancels, key)
		if len(set.cancels) == 0 && f.bySB[id] == set {
			delete(f.bySB, id)
		}
		f.mu.Unlock()
		cancel(nil)
	}
}

// sweep cancels the requests of sandboxes that stopped running, every
// interval, until no request is in flight.
func (f *inflight) sweep() {
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for range tick.C {
		// Asked outside f.mu: the engine has locks of its own.
		live := f.running()
		f.mu.Lock()
		if len(f.bySB) == 0 {
			f.sweeping = false
			f.mu.Unlock()
			return
		}
		for id, set := range f.bySB {
			if _, ok := slices.BinarySearch(live, id); ok {
				continue
			}
			for c := range set.cancels {
				(*c)(errSandboxGone)
			}
			delete(f.bySB, id)
		}
		f.mu.Unlock()
	}
}
