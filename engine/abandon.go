package engine

import (
	"context"
	"time"

	"github.com/lightbearco/tupper/backend"
)

// abandon removes what a failed create left behind: the backend's
// sandbox, the record and the image lease. It tries once at once, and
// what fails (a loaded host, a busy disk) is tried again in the
// background, backing off up to StopRetry, until it succeeds or the engine
// closes: nothing of a failed create waits for the next start to be
// cleaned. Recovery at the next start remains for what a crash leaves.
func (e *Engine) abandon(be backend.Backend, id string) {
	if e.tryAbandon(be, id) {
		return
	}
	// Add under mu after checking closed, as expire does: Close waits
	// for what was added before it set closed.
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		delay := time.Second
		for {
			select {
			case <-e.bg.Done():
				return
			case <-time.After(delay):
			}
			if e.tryAbandon(be, id) {
				return
			}
			delay = min(2*delay, e.cfg.StopRetry)
		}
	}()
}

// tryAbandon makes one attempt of abandon and reports whether everything
// went.
func (e *Engine) tryAbandon(be backend.Backend, id string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bg), 30*time.Second)
	defer cancel()
	log := e.log.With("sandbox", id, "op", "create")
	if err := be.Stop(ctx, id); err != nil {
		log.Warn("clean up a failed create (tried again later)", "err", err)
		return false
	}
	if err := e.store.Delete(ctx, id); err != nil {
		log.Warn("delete the record of a failed create (tried again later)", "err", err)
		return false
	}
	e.releaseImage(ctx, id)
	return true
}
