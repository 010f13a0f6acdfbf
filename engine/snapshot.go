package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// A snapshot is a checkpoint of a running sandbox, taken while it runs on
// (backend.Checkpointer with keep), kept under <root>/snapshots/<id> with
// its record in the store: new sandboxes start from it as from a template,
// each with the sandbox's processes, memory and files as they were, and an
// id, access token and network of its own. A fork is a snapshot that
// lives only as long as it takes to start its sandboxes.

// Snapshot is a snapshot's record as the engine keeps it.
type Snapshot = store.Snapshot

func (e *Engine) snapshotDir(id string) string { return filepath.Join(e.cfg.Root, "snapshots", id) }

// snapshotLease is the image lease holder of snapshot id: a snapshot
// keeps its image as a sandbox does.
func snapshotLease(id string) string { return "snapshot-" + id }

// maxSnapshotName bounds a snapshot's name.
const maxSnapshotName = 128

// CreateSnapshot saves running sandbox id, which runs on, as a snapshot
// named name (optional; unique within the sandbox's team). A paused
// sandbox's checkpoint is copied instead.
func (e *Engine) CreateSnapshot(ctx context.Context, id, name string) (*Snapshot, error) {
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	if len(name) > maxSnapshotName || strings.ContainsAny(name, "\x00/") {
		return nil, fmt.Errorf("snapshot name %.40q: at most %d bytes, no '/': %w", name, maxSnapshotName, errdefs.ErrInvalidArgument)
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	l.op.Lock()
	defer l.op.Unlock()
	e.mu.Lock()
	rec := l.rec.Clone()
	e.mu.Unlock()
	if kept, _, err := e.store.ListSnapshots(ctx, store.SnapshotQuery{Team: rec.Team}); err != nil {
		return nil, err
	} else if len(kept) >= e.cfg.MaxSnapshotsPerTeam {
		return nil, fmt.Errorf("snapshot: your team keeps %d snapshots, the most it may: delete some first: %w", len(kept), errdefs.ErrFailedPrecondition)
	}
	if err := e.checkHostDisk(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if name != "" {
		if _, err := e.store.GetSnapshot(ctx, rec.Team, name); err == nil {
			return nil, fmt.Errorf("snapshot %q exists: name another, or delete it first: %w", name, errdefs.ErrAlreadyExists)
		}
		// Creates name snapshots and templates alike.
		if _, err := e.cfg.Images.Resolve(ctx, name); err == nil {
			return nil, fmt.Errorf("snapshot name %q is a template's or image's: name another: %w", name, errdefs.ErrAlreadyExists)
		}
	}
	sn := &Snapshot{ID: "snap-" + newID(), Team: rec.Team, Creator: rec.Creator, CreatedAt: time.Now().UTC(), Source: *rec}
	if s, ok := ScopeFrom(ctx); ok {
		sn.Creator = s.Key
	}
	if name != "" {
		sn.Names = []string{name}
	}
	dir := e.snapshotDir(sn.ID)
	if err := e.saveState(ctx, l, rec, dir); err != nil {
		return nil, fmt.Errorf("sandbox %q: snapshot: %w", id, err)
	}
	sn.SizeBytes = dirSize(dir)
	if l, ok := e.cfg.Images.(ImageLeaser); ok {
		if err := l.Lease(ctx, e.leasePrefix+snapshotLease(sn.ID), rec.ImageID); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("snapshot: lease image %s: %w", rec.ImageRef, err)
		}
	}
	if err := e.store.PutSnapshot(context.WithoutCancel(ctx), sn); err != nil {
		e.releaseImage(ctx, snapshotLease(sn.ID))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("snapshot: %w", e.explainDiskFull(err))
	}
	e.log.Info("snapshot made", "snapshot", sn.ID, "sandbox", id, "bytes", sn.SizeBytes)
	return sn, nil
}

// saveState writes the state of live sandbox rec (l its entry, whose op
// the caller holds) into dir: a checkpoint of it running on, or a copy of
// its pause's checkpoint.
func (e *Engine) saveState(ctx context.Context, l *liveSandbox, rec *Sandbox, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if rec.State == store.StatePaused {
		return copyTree(e.checkpointDir(rec.ID), dir)
	}
	cp, err := checkpointer(l.be, l.beName, "snapshot")
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	return e.explainDiskFull(cp.Checkpoint(cctx, rec.ID, dir, true))
}

// ListSnapshots returns the snapshots within the scope of ctx, of sandbox
// sandboxID and named name when those are set, and a token for the next
// page.
func (e *Engine) ListSnapshots(ctx context.Context, sandboxID, name string, limit int, next string) ([]*Snapshot, string, error) {
	q := store.SnapshotQuery{SandboxID: sandboxID, Name: name, Limit: limit, After: next}
	if s, ok := ScopeFrom(ctx); ok {
		q.Team = s.Team
		if s.OnlyKey {
			// A key confined to its own sandboxes sees its own
			// snapshots: one holds what its sandbox held.
			if s.Key == "" {
				return nil, "", nil
			}
			q.Creator = s.Key
		}
	}
	return e.store.ListSnapshots(ctx, q)
}

// GetSnapshot returns the snapshot that ref (an id or a name) names within
// the scope of ctx.
func (e *Engine) GetSnapshot(ctx context.Context, ref string) (*Snapshot, error) {
	team := DefaultTeam
	s, scoped := ScopeFrom(ctx)
	if scoped {
		team = s.Team
	}
	sn, err := e.store.GetSnapshot(ctx, team, ref)
	if err != nil {
		return nil, err
	}
	if scoped && s.OnlyKey && (s.Key == "" || sn.Creator != s.Key) {
		return nil, fmt.Errorf("snapshot %q: %w", ref, errdefs.ErrNotFound)
	}
	return sn, nil
}

// DeleteSnapshot removes the snapshot that ref names. Sandboxes started
// from it run on: they need it no more.
func (e *Engine) DeleteSnapshot(ctx context.Context, ref string) error {
	sn, err := e.GetSnapshot(ctx, ref)
	if err != nil {
		return err
	}
	if err := e.store.DeleteSnapshot(ctx, sn.ID); err != nil {
		return err
	}
	if err := os.RemoveAll(e.snapshotDir(sn.ID)); err != nil {
		e.log.Warn("remove snapshot files", "snapshot", sn.ID, "err", err)
	}
	e.releaseImage(ctx, snapshotLease(sn.ID))
	e.log.Info("snapshot deleted", "snapshot", sn.ID)
	return nil
}

// createFromSnapshot starts a sandbox from snapshot sn: its source's
// image, limits, environment and (unless opts names one) network policy,
// with opts' timeout, metadata and lifecycle.
func (e *Engine) createFromSnapshot(ctx context.Context, opts CreateOptions, sn *Snapshot) (*Sandbox, error) {
	if len(opts.Env) > 0 {
		return nil, fmt.Errorf("create from snapshot %s: a sandbox started from a snapshot keeps the environment it was saved with: %w", sn.ID, errdefs.ErrInvalidArgument)
	}
	if opts.Backend != "" && opts.Backend != cmp.Or(sn.Source.Backend, e.cfg.BackendName) {
		return nil, fmt.Errorf("create from snapshot %s: it was made on the %s backend, which it must run on: %w", sn.ID, sn.Source.Backend, errdefs.ErrInvalidArgument)
	}
	return e.startCopy(ctx, &sn.Source, e.snapshotDir(sn.ID), opts, sn.ID)
}

// ForkResult is one sandbox of a fork: the sandbox, or why it did not
// start.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// maxFork bounds the sandboxes of one fork.
const maxFork = 64

// Fork starts count sandboxes from running sandbox id as it is now, while
// it runs on; each has its processes, memory and files, and an id, access
// token and network of its own, and lives timeout (zero: the source's
// timeout). Each result is reported on its own; the error is for the fork
// as a whole (an unknown sandbox, a backend that cannot checkpoint).
func (e *Engine) Fork(ctx context.Context, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	if count < 1 || count > maxFork {
		return nil, fmt.Errorf("fork: count %d must be from 1 to %d: %w", count, maxFork, errdefs.ErrInvalidArgument)
	}
	if timeout < 0 || timeout > e.cfg.MaxTimeout {
		return nil, fmt.Errorf("fork: timeout %v must be at most %v: %w", timeout, e.cfg.MaxTimeout, errdefs.ErrInvalidArgument)
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.cfg.Root, "forks", newID())
	l.op.Lock()
	e.mu.Lock()
	rec := l.rec.Clone()
	e.mu.Unlock()
	err = e.saveState(ctx, l, rec, dir)
	l.op.Unlock()
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: fork: %w", id, err)
	}
	defer os.RemoveAll(dir)
	opts := CreateOptions{
		Timeout: cmp.Or(timeout, rec.Timeout), Metadata: rec.Metadata, Network: rec.Network, AllowInternetAccess: rec.AllowInternetAccess,
		AutoPause: rec.AutoPause, AutoPauseMemory: rec.AutoPauseMemory, AutoResume: rec.AutoResume, Secure: rec.Secure,
	}
	out := make([]ForkResult, count)
	for i := range out {
		out[i].Sandbox, out[i].Err = e.startCopy(ctx, rec, dir, opts, "")
	}
	return out, nil
}

// startCopy starts a new sandbox from the checkpoint in dir of sandbox
// src: src's image, limits and environment, opts' timeout, metadata,
// lifecycle and network policy (src's when opts names none). It goes
// through admission as a create does, and a failure leaves nothing.
func (e *Engine) startCopy(ctx context.Context, src *Sandbox, dir string, opts CreateOptions, snapshotID string) (*Sandbox, error) {
	if err := opts.validate(&e.cfg); err != nil {
		return nil, err
	}
	beName := cmp.Or(src.Backend, e.cfg.BackendName)
	be, err := e.backendNamed(ctx, beName)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	cp, err := checkpointer(be, beName, "start from a checkpoint")
	if err != nil {
		return nil, err
	}
	done, err := e.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	now := time.Now().UTC()
	sb := src.Clone()
	sb.ID, sb.AccessToken, sb.Backend, sb.SnapshotID = newID(), newToken(), beName, snapshotID
	sb.State, sb.StartedAt = store.StateCreating, now
	sb.Timeout = cmp.Or(opts.Timeout, e.cfg.DefaultTimeout)
	sb.EndAt = now.Add(sb.Timeout)
	sb.Metadata = opts.Metadata
	sb.AutoPause, sb.AutoPauseMemory, sb.AutoResume, sb.Secure = opts.AutoPause, opts.AutoPauseMemory, opts.AutoResume, opts.Secure
	if opts.Network != nil || opts.AllowInternetAccess != nil {
		sb.Network, sb.AllowInternetAccess = opts.Network, opts.AllowInternetAccess
	}
	sb.AgentAddr, sb.Pid, sb.PausedAt, sb.MemoryKept = "", 0, time.Time{}, false
	sb.KilledAt, sb.KillReason = time.Time{}, ""
	owners(ctx, sb)
	log := e.log.With("sandbox", sb.ID, "op", "start-copy", "from", src.ID)
	if err := e.checkHostDisk(); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if err := e.store.Put(ctx, sb); err != nil {
		return nil, fmt.Errorf("create: %w", e.explainDiskFull(err))
	}
	if err := e.leaseImage(ctx, sb); err != nil {
		e.store.Delete(context.WithoutCancel(ctx), sb.ID)
		return nil, fmt.Errorf("create: %w", err)
	}
	started, err := e.restore(ctx, be, cp, sb, dir, src.AccessToken)
	if err == nil {
		sb.AgentAddr, sb.Pid, sb.State = started.AgentAddr, started.Pid, store.StateRunning
		putCtx, cancel := context.WithTimeout(e.bg, 10*time.Second)
		err = e.store.Put(putCtx, sb)
		cancel()
	}
	if err != nil {
		log.Error("start from checkpoint failed", "err", err)
		e.abandon(be, sb.ID)
		return nil, fmt.Errorf("create sandbox from %s's checkpoint: %w", src.ID, err)
	}
	if !e.track(sb, be) {
		return nil, fmt.Errorf("create: engine is closed: %w", errdefs.ErrUnavailable)
	}
	log.Info("sandbox started from checkpoint", "took", time.Since(now))
	return sb.Clone(), nil
}

// copyTree copies the regular files of directory src into dst, which it
// makes: hard links where src and dst share a file system (a checkpoint's
// files are never written again), copies elsewhere.
func copyTree(src, dst string) (retErr error) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(dst)
		}
	}()
	for _, ent := range entries {
		if !ent.Type().IsRegular() {
			continue
		}
		from, to := filepath.Join(src, ent.Name()), filepath.Join(dst, ent.Name())
		if err := os.Link(from, to); err == nil {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
