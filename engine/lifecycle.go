package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// track starts enforcing the time to live of sb, running on be, or keeps
// it paused. It reports false when the engine is closed.
func (e *Engine) track(sb *Sandbox, be backend.Backend) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	id := sb.ID
	l := &liveSandbox{
		be: be, beName: sb.Backend, rec: sb.Clone(), endAt: sb.EndAt, conns: &connSet{},
		timer: time.AfterFunc(time.Until(sb.EndAt), func() { e.expire(id) }),
	}
	e.live[id] = l
	if sb.State == store.StatePaused {
		l.timer.Stop()
		return true
	}
	e.watchLocked(id, l)
	return true
}

// watchLocked starts watching for the end of l, the live entry of sandbox
// id, booted anew. The caller holds e.mu.
func (e *Engine) watchLocked(id string, l *liveSandbox) {
	l.gen++
	if w, ok := l.be.(backend.Waiter); ok {
		e.wg.Add(1)
		go e.watch(w, id, l, l.gen)
	}
}

// watch kills (that is, cleans up and records) a sandbox that ends on its
// own, so that it is reported dead at once rather than when its time runs
// out. gen is the boot of l it watches: a pause ends that boot on
// purpose, and a resume starts another.
func (e *Engine) watch(w backend.Waiter, id string, l *liveSandbox, gen uint64) {
	defer e.wg.Done()
	if err := w.Wait(e.bg, id); err != nil {
		return // the engine is closing, or the sandbox is already gone
	}
	e.mu.Lock()
	mine := e.live[id] == l && l.gen == gen && !l.suspending && l.rec.State == store.StateRunning
	e.mu.Unlock()
	if !mine {
		return // killed or paused on purpose
	}
	e.log.Warn("sandbox exited on its own", "sandbox", id)
	if err := e.kill(e.bg, id, exitedReason); err != nil && !errdefs.IsNotFound(err) {
		e.log.Error("clean up exited sandbox", "sandbox", id, "err", err)
	}
}

// exitedReason is recorded for sandboxes that end on their own.
const exitedReason = "the sandbox exited on its own: it crashed, ran out of memory, or its agent died"

// expire kills a sandbox whose time is up.
func (e *Engine) expire(id string) {
	// Add under mu, after checking closed: Close sets closed under mu
	// before it waits, so no Add can race its Wait. The end time is
	// checked under the same lock that SetTimeout moves it under, and the
	// sandbox leaves live in that same step, so an extension that
	// answered success is never followed by this kill.
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	l, ok := e.live[id]
	if !ok {
		e.mu.Unlock()
		return
	}
	if left := time.Until(l.endAt); left > 0 {
		l.timer.Reset(left)
		e.mu.Unlock()
		return
	}
	if l.rec.State == store.StatePaused {
		e.mu.Unlock()
		return // a paused sandbox waits, for ever, to be resumed or killed
	}
	if l.rec.AutoPause {
		e.wg.Add(1)
		e.mu.Unlock()
		defer e.wg.Done()
		keep := l.rec.AutoPauseMemory == nil || *l.rec.AutoPauseMemory
		err := e.pause(e.bg, id, keep)
		if err == nil || errdefs.IsNotFound(err) || errors.Is(err, errdefs.ErrFailedPrecondition) {
			return // paused, or killed or paused meanwhile
		}
		e.log.Error("pause expired sandbox; killing it instead", "sandbox", id, "err", err)
		if err := e.kill(e.bg, id, fmt.Sprintf("timeout: pausing it failed: %v", err)); err != nil && !errdefs.IsNotFound(err) {
			e.log.Error("kill expired sandbox", "sandbox", id, "err", err)
		}
		return
	}
	delete(e.live, id)
	e.wg.Add(1)
	e.mu.Unlock()
	defer e.wg.Done()
	l.conns.cutAll()
	if err := e.stop(e.bg, id, l, "timeout"); err != nil {
		e.log.Error("kill expired sandbox", "sandbox", id, "err", err)
	}
}

// Get returns a live sandbox's record, from memory: no disk is read for
// a sandbox that runs.
func (e *Engine) Get(ctx context.Context, id string) (*Sandbox, error) {
	e.mu.Lock()
	l, ok := e.live[id]
	var sb *Sandbox
	if ok {
		sb = l.rec.Clone()
	}
	e.mu.Unlock()
	if ok {
		if !visible(ctx, sb) {
			return nil, errUnknown(id)
		}
		return sb, nil
	}
	// Not live: say why, from the record.
	sb, err := e.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !visible(ctx, sb) {
		return nil, errUnknown(id)
	}
	if sb.State == store.StateKilled || sb.State == store.StateCreating {
		return nil, fmt.Errorf("sandbox %q: %w (it was %s)", id, errdefs.ErrNotFound, describeGone(sb))
	}
	return nil, fmt.Errorf("sandbox %q: %w (it is being killed)", id, errdefs.ErrNotFound)
}

// liveOf returns the live entry of sandbox id.
func (e *Engine) liveOf(id string) (*liveSandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.live[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return l, nil
}

// updateRecord changes live sandbox id's record with edit and writes it
// to the store, outside the global lock. Writes of one sandbox's record
// are ordered by its writeMu; a sandbox that stops being live meanwhile
// fails with errdefs.ErrNotFound, and apply (called under the global
// lock with the new record, when set) does not run.
func (e *Engine) updateRecord(ctx context.Context, id string, edit func(*Sandbox) error, apply func(*liveSandbox)) (*Sandbox, error) {
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	e.mu.Lock()
	rec := l.rec.Clone()
	stillLive := e.live[id] == l
	e.mu.Unlock()
	if !stillLive {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err := edit(rec); err != nil {
		return nil, err
	}
	if err := e.store.Put(ctx, rec); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[id] != l {
		return nil, fmt.Errorf("sandbox %q: %w (it was killed meanwhile)", id, errdefs.ErrNotFound)
	}
	l.rec = rec
	if apply != nil {
		apply(l)
	}
	return rec.Clone(), nil
}

// isLive reports whether the engine runs sandbox id: a record that says
// "running" while a kill is under way (its backend still stopping it) is
// not.
func (e *Engine) isLive(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.live[id]
	return ok
}

func describeGone(sb *Sandbox) string {
	if sb.State == store.StateCreating {
		return "still being created"
	}
	return "killed: " + sb.KillReason
}

// ListOptions filter a listing.
type ListOptions struct {
	// States keeps sandboxes in these states; empty means running and
	// paused. Pass store.StateKilled to see killed sandboxes.
	States []string
	// Metadata keeps sandboxes whose metadata hold all these pairs.
	Metadata map[string]string
	// Limit is the page size; zero means all.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

// List returns sandboxes matching opts, within the scope of ctx, and a
// token for the next page.
func (e *Engine) List(ctx context.Context, opts ListOptions) ([]*Sandbox, string, error) {
	if err := checkReservedMetadata("list", opts.Metadata); err != nil {
		return nil, "", err
	}
	states := opts.States
	if len(states) == 0 {
		states = []string{store.StateRunning, store.StatePaused}
	}
	q := store.Query{States: states, Metadata: opts.Metadata, Limit: opts.Limit, After: opts.NextToken}
	if s, ok := ScopeFrom(ctx); ok {
		q.Team = s.Team
		if s.OnlyKey {
			// An empty Key would match every creator in the store's
			// query; no real key has an empty id.
			q.Creator = s.Key
			if q.Creator == "" {
				return nil, "", nil
			}
		}
	}
	list, next, err := e.store.List(ctx, q)
	if err != nil {
		return nil, "", err
	}
	// A sandbox whose kill is under way is gone for its users already;
	// one waiting in a warm pool is nobody's yet.
	list = slices.DeleteFunc(list, func(sb *Sandbox) bool {
		return sb.Team == poolTeam || (sb.State == store.StateRunning || sb.State == store.StatePaused) && !e.isLive(sb.ID)
	})
	return list, next, nil
}

// Connect returns a running sandbox, resuming it first when it is paused;
// a positive timeout also sets its time to live from now, as E2B's
// connect does, though never shortens that of a running one.
func (e *Engine) Connect(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	sb, err := e.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == store.StatePaused {
		return e.Resume(ctx, id, timeout)
	}
	if timeout > 0 && time.Now().Add(timeout).After(sb.EndAt) {
		if err := e.SetTimeout(ctx, id, timeout); err != nil {
			return nil, err
		}
		return e.Get(ctx, id)
	}
	return sb, nil
}

// SetTimeout makes sandbox id live for timeout from now.
func (e *Engine) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	if timeout <= 0 || timeout > e.cfg.MaxTimeout {
		return fmt.Errorf("sandbox %q: timeout %v must be above 0 and at most %v: %w", id, timeout, e.cfg.MaxTimeout, errdefs.ErrInvalidArgument)
	}
	if err := e.checkScope(ctx, id); err != nil {
		return err
	}
	// The new end is made live under the same lock that expire checks
	// the end under, and only while the sandbox is live: an extension
	// that answers success is never followed by its timeout's kill.
	_, err := e.updateRecord(ctx, id, func(sb *Sandbox) error {
		sb.EndAt = time.Now().UTC().Add(timeout)
		return nil
	}, func(l *liveSandbox) {
		l.endAt = l.rec.EndAt
		l.timer.Reset(time.Until(l.endAt))
	})
	return err
}

// Kill stops sandbox id and removes everything it held. Killing an unknown
// or already killed sandbox fails with errdefs.ErrNotFound.
func (e *Engine) Kill(ctx context.Context, id string) error {
	if err := e.checkScope(ctx, id); err != nil {
		return err
	}
	return e.kill(ctx, id, "killed by request")
}

func (e *Engine) kill(ctx context.Context, id, reason string) error {
	e.mu.Lock()
	l, ok := e.live[id]
	if ok {
		delete(e.live, id)
		l.timer.Stop()
	}
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	l.conns.cutAll()
	return e.stop(ctx, id, l, reason)
}

// stop stops a sandbox that the caller took out of live, and records it
// killed. When the backend fails to stop it, the sandbox goes back into
// live with its timer set to try again: nothing is left running untracked.
func (e *Engine) stop(ctx context.Context, id string, l *liveSandbox, reason string) error {
	// Stopping must finish even when the caller gives up: a half-stopped
	// sandbox is worse than a slow answer.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := l.be.Stop(stopCtx, id); err != nil {
		e.mu.Lock()
		if !e.closed {
			l.endAt = time.Now() // expire must not wait for a later end
			l.conns = &connSet{}
			e.live[id] = l
			l.timer.Reset(e.cfg.StopRetry)
		}
		e.mu.Unlock()
		return fmt.Errorf("sandbox %q: stop (retried in %v): %w", id, e.cfg.StopRetry, err)
	}
	e.markKilled(stopCtx, id, l, reason)
	return nil
}

// markKilled records sandbox id killed; l is its former live entry, if
// it had one, whose record writes this one must follow.
func (e *Engine) markKilled(ctx context.Context, id string, l *liveSandbox, reason string) {
	if l != nil {
		l.writeMu.Lock()
		defer l.writeMu.Unlock()
	}
	sb, err := e.store.Get(ctx, id)
	if err != nil {
		return
	}
	sb.State, sb.KilledAt, sb.KillReason = store.StateKilled, time.Now().UTC(), reason
	if err := e.store.Put(ctx, sb); err != nil {
		e.log.Error("record kill", "sandbox", id, "err", err)
	}
	e.releaseImage(ctx, id)
	if sb.Rebooted {
		e.dropRebootImage(ctx, id)
	}
	e.removeCheckpoint(id)
	e.log.Info("sandbox killed", "sandbox", id, "reason", reason)
	if e.cfg.OnKilled != nil {
		e.cfg.OnKilled(id)
	}
}

// recover re-attaches to the sandboxes the store says run and their
// backends confirm, marks the others killed, and stops whatever each
// backend in use holds that no live record explains. It opens every
// backend a record names; a record whose backend is not built in or does
// not open is recorded killed, with the reason, and the engine starts all
// the same.
func (e *Engine) recover(ctx context.Context) error {
	recs, _, err := e.store.List(ctx, store.Query{States: []string{store.StateCreating, store.StateRunning, store.StatePaused}})
	if err != nil {
		return err
	}
	// A backend that failed to open is tried once, not once per record.
	unavailable := map[string]error{}
	for _, sb := range recs {
		sb.Backend = cmp.Or(sb.Backend, e.cfg.BackendName)
		log := e.log.With("sandbox", sb.ID, "op", "recover", "backend", sb.Backend)
		err, failed := unavailable[sb.Backend]
		var be backend.Backend
		if !failed {
			be, err = e.backendNamed(ctx, sb.Backend)
			if err != nil {
				unavailable[sb.Backend] = err
			}
		}
		if err != nil {
			// Nothing can reach what the sandbox left, if anything:
			// say so, and keep the daemon up for the others.
			log.Error("the sandbox's backend is not available; recording it killed (what it left running, if anything, is not stopped)", "err", err)
			if sb.State == store.StateCreating {
				e.store.Delete(ctx, sb.ID)
				continue
			}
			e.markKilled(ctx, sb.ID, nil, fmt.Sprintf("its backend was not available when the engine started: %v", err))
			continue
		}
		if sb.State == store.StatePaused {
			if err := e.checkCheckpoint(sb.ID); err != nil {
				e.markKilled(ctx, sb.ID, nil, fmt.Sprintf("it was paused, but its checkpoint is lost: %v", err))
				log.Error("paused sandbox lost its checkpoint", "err", err)
				continue
			}
			e.track(sb, be)
			log.Info("kept paused sandbox")
			continue
		}
		if sb.State == store.StateCreating {
			// A create that never finished: its caller got no answer.
			e.cleanup(ctx, be, sb.ID)
			e.store.Delete(ctx, sb.ID)
			log.Info("removed half-created sandbox")
			continue
		}
		st, err := be.State(ctx, sb.ID)
		switch {
		case errdefs.IsNotFound(err) || err == nil && st == backend.StateStopped:
			e.cleanup(ctx, be, sb.ID)
			e.markKilled(ctx, sb.ID, nil, "its sandbox process died while the engine was down")
			log.Warn("sandbox died while the engine was down", "state", st, "err", err)
			continue
		case err != nil:
			// "Could not tell" is no death: the sandbox is kept, and its
			// timeout, a kill or the next start decide. Killing what
			// may be alive would lose a user's work to a hiccup.
			log.Warn("could not tell whether the sandbox runs; keeping it", "err", err)
		}
		e.track(sb, be)
		if time.Now().After(sb.EndAt) {
			log.Info("sandbox expired while the engine was down")
		}
		log.Info("re-attached to sandbox", "ends", sb.EndAt)
	}
	// Killed records answer "why is my sandbox gone" for a while; a
	// sandbox lives at most MaxTimeout, so twice that is plenty.
	if n, err := e.store.DeleteKilledStartedBefore(ctx, time.Now().Add(-2*e.cfg.MaxTimeout)); err != nil {
		e.log.Warn("prune killed sandboxes", "err", err)
	} else if n > 0 {
		e.log.Info("pruned records of long-killed sandboxes", "count", n)
	}
	for name, be := range e.openedBackends() {
		if err := e.sweep(ctx, name, be); err != nil {
			if name == e.cfg.BackendName {
				return err
			}
			// Another backend's leftovers wait for the next start.
			e.log.Warn("list leftover sandboxes", "backend", name, "err", err)
		}
	}
	e.releaseStaleLeases(ctx)
	return nil
}

// sweep stops what backend name holds that no live sandbox of that
// backend explains: leftovers of a crash.
func (e *Engine) sweep(ctx context.Context, name string, be backend.Backend) error {
	held, err := be.List(ctx)
	if err != nil {
		return fmt.Errorf("list %s sandboxes: %w", name, err)
	}
	e.mu.Lock()
	var orphans []string
	for _, id := range held {
		if l, ok := e.live[id]; !ok || l.beName != name {
			orphans = append(orphans, id)
		}
	}
	e.mu.Unlock()
	for _, id := range orphans {
		e.log.Warn("stopping leftover sandbox", "sandbox", id, "backend", name)
		e.cleanup(ctx, be, id)
	}
	return nil
}

// releaseStaleLeases drops this engine's image leases of sandboxes it
// does not run (a crash between a kill and its release, a create that
// never finished).
func (e *Engine) releaseStaleLeases(ctx context.Context) {
	l, ok := e.cfg.Images.(ImageLeaser)
	if !ok {
		return
	}
	holders, err := l.Holders(ctx, "")
	if err != nil {
		e.log.Warn("list image leases", "err", err)
		return
	}
	for _, h := range holders {
		id, mine := strings.CutPrefix(h, e.leasePrefix)
		if !mine || e.isLive(id) {
			continue
		}
		if snap, ok := strings.CutPrefix(id, snapshotLease("")); ok {
			if _, err := e.store.GetSnapshotByID(ctx, snap); err == nil || !errdefs.IsNotFound(err) {
				continue // the snapshot keeps its image
			}
		}
		e.releaseImage(ctx, id)
	}
}

// cleanup stops what be holds of sandbox id.
func (e *Engine) cleanup(ctx context.Context, be backend.Backend, id string) {
	if err := be.Stop(ctx, id); err != nil {
		e.log.Error("clean up sandbox", "sandbox", id, "err", err)
	}
}

// Running returns the ids of the sandboxes the engine runs, sorted.
func (e *Engine) Running() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.live))
	for id := range e.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
