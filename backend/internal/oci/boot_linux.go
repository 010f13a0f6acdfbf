package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	gorunc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/network"
)

const (
	// cleanupTimeout bounds the undo of a failed Start, which runs even
	// when the Start's ctx is done.
	cleanupTimeout = 30 * time.Second
	// RecordFile is the file in a bundle that keeps what Start returned.
	RecordFile = "sandbox.json"
	// SpecFile is the bundle's OCI spec.
	SpecFile = "config.json"
)

// Boot is one Start in progress: its sandbox's bundle claimed, the undo of
// each step done so far, and the step log. A backend's Start is
//
//	bt, err := b.BeginStart(ctx, spec, floors)
//	if err != nil { return nil, err }
//	defer bt.End(&retErr)
//	… its own steps, each adding its undo to bt.Undo …
//	ep, err := bt.Network(spec)
//	pid, err := bt.Run(cmd, between)
//	return bt.Done(ep, pid, record)
//
// On failure, End undoes the steps in reverse.
type Boot struct {
	r      *Runtime
	ctx    context.Context
	ID     string
	Dir    string
	Undo   cleanup.Stack
	Log    *slog.Logger
	begin  time.Time
	step   time.Time
	done   bool
	unlock func()
}

// BeginStart checks spec against floors, locks its id and claims its bundle
// directory (the mark of a sandbox this backend owns), with the console's
// tmpfs in it. It fails with errdefs.ErrAlreadyExists when the id is
// taken here, or its cgroup by another backend root.
func (r *Runtime) BeginStart(ctx context.Context, spec *backend.Spec, floors Floors) (*Boot, error) {
	if spec == nil {
		return nil, fmt.Errorf("%s start: nil spec: %w", r.Name, errdefs.ErrInvalidArgument)
	}
	if err := ValidateSpec(spec, floors); err != nil {
		return nil, err
	}
	id := spec.ID
	unlock := r.Locks.Lock(id)
	now := time.Now()
	bt := &Boot{r: r, ctx: ctx, ID: id, Dir: r.BundleDir(id), Log: r.Log.With("sandbox", id, "op", "start"), begin: now, step: now, unlock: unlock}
	if err := os.Mkdir(bt.Dir, 0o700); err != nil {
		unlock()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	bt.Undo.Add(func() error { return RemoveBundle(bt.Dir) })
	fail := func(err error) (*Boot, error) {
		bt.End(&err)
		return nil, err
	}
	cg := r.CgroupsPath(id)
	if dirs, err := CgroupDirs(cg); err != nil || len(dirs) > 0 {
		// Someone else's sandbox of this id (another root) owns it.
		return fail(fmt.Errorf("sandbox %q: cgroup %s in use (%v): %w", id, cg, err, errdefs.ErrAlreadyExists))
	}
	if err := MountLog(bt.Dir); err != nil {
		return fail(fmt.Errorf("sandbox %q: %w", id, err))
	}
	bt.Undo.Add(func() error { return UnmountAll(filepath.Join(bt.Dir, LogDir)) })
	return bt, nil
}

// Step logs that step name is done, with how long it took.
func (bt *Boot) Step(name string) {
	bt.Log.Debug("step done", "step", name, "took", time.Since(bt.step))
	bt.step = time.Now()
}

// Fail wraps err as a failure of this sandbox's start.
func (bt *Boot) Fail(err error) error { return fmt.Errorf("sandbox %q: %w", bt.ID, err) }

// cleanupContext bounds an undo, which runs even when the Start's ctx is
// done.
func (bt *Boot) cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(bt.ctx), cleanupTimeout)
}

// Network makes the sandbox's network with its egress policy.
func (bt *Boot) Network(spec *backend.Spec) (*network.Endpoint, error) {
	ep, err := bt.r.Pool.Setup(bt.ctx, bt.ID, spec.Network)
	if err != nil {
		return nil, err
	}
	bt.Undo.Add(func() error {
		c, cancel := bt.cleanupContext()
		defer cancel()
		return bt.r.Pool.Teardown(c, bt.ID)
	})
	bt.Step("network")
	return ep, nil
}

// Run writes spec as the bundle's OCI spec, then creates and starts the
// container with cmd (the Runtime's own, or a copy with more flags),
// calling between (when set) after create and before start, and returns
// the pid of the runtime's sandbox process. The runtime's output and
// then the agent's go to the console. The runtime's commands are not cut
// short by ctx (see Context): ctx is checked between them instead, so a
// Start may outlive its ctx by one step.
func (bt *Boot) Run(spec any, cmd *gorunc.Runc, between func() error) (int, error) {
	return bt.launch(spec, func(rctx context.Context, console *os.File, pidFile string) error {
		if err := cmd.Create(rctx, bt.ID, bt.Dir, &gorunc.CreateOpts{IO: FileIO{F: console}, PidFile: pidFile}); err != nil {
			return fmt.Errorf("%s create: %w: %s", bt.r.Name, err, Tail(ConsolePath(bt.Dir), 2048))
		}
		bt.Step("create")
		if between != nil {
			if err := between(); err != nil {
				return err
			}
		}
		if err := bt.checkCtx("after create by"); err != nil {
			return err
		}
		if err := cmd.Start(rctx, bt.ID); err != nil {
			return fmt.Errorf("%s start: %w: %s", bt.r.Name, err, Tail(ConsolePath(bt.Dir), 2048))
		}
		bt.Step("start")
		return nil
	})
}

// Restore is Run for a sandbox booted from the checkpoint in image: the
// runtime's restore takes the place of create and start, and after (when
// set) runs once it is up. The console starts with the checkpointed
// sandbox's, when image keeps one (CheckpointConsole).
func (bt *Boot) Restore(spec any, cmd *gorunc.Runc, image string, after func() error) (int, error) {
	if err := CopyFile(filepath.Join(image, CheckpointConsole), ConsolePath(bt.Dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, bt.Fail(err)
	}
	return bt.launch(spec, func(rctx context.Context, console *os.File, pidFile string) error {
		opts := &gorunc.RestoreOpts{
			CheckpointOpts: gorunc.CheckpointOpts{ImagePath: image},
			IO:             FileIO{F: console}, Detach: true, PidFile: pidFile,
		}
		if _, err := cmd.Restore(rctx, bt.ID, bt.Dir, opts); err != nil {
			return fmt.Errorf("%s restore: %w: %s", bt.r.Name, err, Tail(ConsolePath(bt.Dir), 2048))
		}
		bt.Step("restore")
		if after != nil {
			return after()
		}
		return nil
	})
}

// CheckpointConsole is the file of a checkpoint directory that keeps the
// checkpointed sandbox's console (its agent's log), which a restore
// continues.
const CheckpointConsole = backend.CheckpointLog

// launch writes spec as the bundle's OCI spec and runs boot, which brings
// the sandbox up with its output on console and its runtime's pid in
// pidFile, and returns that pid.
func (bt *Boot) launch(spec any, boot func(rctx context.Context, console *os.File, pidFile string) error) (int, error) {
	if err := WriteJSON(filepath.Join(bt.Dir, SpecFile), spec); err != nil {
		return 0, bt.Fail(err)
	}
	console, err := os.OpenFile(ConsolePath(bt.Dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, bt.Fail(err)
	}
	defer console.Close()
	bt.Undo.Add(func() error {
		c, cancel := bt.cleanupContext()
		defer cancel()
		return errors.Join(bt.r.Destroy(c, bt.ID), RemoveCgroup(bt.r.CgroupsPath(bt.ID)))
	})
	if err := bt.checkCtx("before"); err != nil {
		return 0, err
	}
	rctx, cancel := Context(bt.ctx)
	defer cancel()
	pidFile := filepath.Join(bt.Dir, PidFile)
	if err := boot(rctx, console, pidFile); err != nil {
		return 0, bt.Fail(err)
	}
	if err := bt.checkCtx("after boot by"); err != nil {
		return 0, err
	}
	pid, err := ReadPid(pidFile)
	if err != nil {
		return 0, bt.Fail(err)
	}
	return pid, nil
}

// checkCtx fails once the Start's ctx is done, saying when.
func (bt *Boot) checkCtx(when string) error {
	if err := bt.ctx.Err(); err != nil {
		return bt.Fail(fmt.Errorf("%s %s: %w", when, bt.r.Name, context.Cause(bt.ctx)))
	}
	return nil
}

// Done records the started sandbox, reached at its network's address, in
// the bundle (record, which must embed backend.Sandbox, is given it), and
// keeps everything made.
func (bt *Boot) Done(ep *network.Endpoint, pid int, record func(backend.Sandbox) any) (*backend.Sandbox, error) {
	sb := backend.Sandbox{
		ID:         bt.ID,
		AgentAddr:  net.JoinHostPort(ep.SandboxAddr.Addr().String(), strconv.Itoa(backend.AgentPort)),
		Pid:        pid,
		StartedAt:  time.Now().UTC(),
		Nameserver: ep.HostAddr.Addr().String(),
	}
	if err := WriteJSON(filepath.Join(bt.Dir, RecordFile), record(sb)); err != nil {
		return nil, bt.Fail(err)
	}
	bt.done = true
	bt.Log.Info("sandbox started", "addr", sb.AgentAddr, "pid", pid, "took", time.Since(bt.begin))
	return &sb, nil
}

// End finishes the start: after Done it only unlocks the id; after a
// failure (*errp set) it undoes every step in reverse, adding to *errp
// what the undo could not, and then unlocks.
func (bt *Boot) End(errp *error) {
	defer bt.unlock()
	if bt.done && *errp == nil {
		bt.Undo.Release()
		return
	}
	if *errp == nil {
		*errp = bt.Fail(errors.New("start ended before it was done"))
	}
	if err := bt.Undo.Run(); err != nil {
		bt.Log.Error("undo of a failed start left something behind", "err", err)
		*errp = errors.Join(*errp, fmt.Errorf("cleanup: %w", err))
	}
	bt.Log.Info("start failed", "err", *errp, "took", time.Since(bt.begin))
}

// MemoryLimit is the memory limit sandbox id was started with, as its
// record says (a "limits" object with "memoryBytes"); zero when unknown.
func (r *Runtime) MemoryLimit(id string) uint64 {
	data, err := os.ReadFile(filepath.Join(r.BundleDir(id), RecordFile))
	if err != nil {
		return 0
	}
	var rec struct {
		Limits struct{ MemoryBytes int64 }
	}
	if json.Unmarshal(data, &rec) != nil {
		return 0
	}
	return uint64(rec.Limits.MemoryBytes)
}
