package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"time"

	gorunc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/idlock"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/network"
)

// RuntimeTimeout bounds one runtime command that changes state.
const RuntimeTimeout = time.Minute

// Runtime is what a backend that runs each sandbox as an OCI container
// (runsc's or runc's) does the same way whatever the runtime: the bundle
// directories, the runtime's container list and states, pause and resume,
// stats, waiting for a crash, the stop of everything a sandbox held, and
// the sandboxes' network. A backend embeds it and adds its Start.
type Runtime struct {
	// Name is the runtime's command name, for messages ("runsc", "runc").
	Name string
	// Cmd drives the runtime, with its --root this backend's alone.
	Cmd *gorunc.Runc
	// Sandboxes holds a bundle directory per sandbox: the mark of a
	// sandbox the backend owns, made first by Start and removed last by
	// Stop.
	Sandboxes    string
	CgroupParent string
	Pool         *network.Pool
	// Egress is nil when sandboxes have no egress.
	Egress *network.Egress
	Locks  idlock.Locks
	Log    *slog.Logger
	// Knows reports whether the runtime keeps state for container id.
	Knows func(id string) (bool, error)
	// Leftovers removes what a create cut short leaves of id in the
	// runtime's root without registering the container.
	Leftovers func(id string) error
}

// BundleDir is sandbox id's bundle directory.
func (r *Runtime) BundleDir(id string) string { return filepath.Join(r.Sandboxes, id) }

// CgroupsPath is sandbox id's cgroup, absolute in each hierarchy.
func (r *Runtime) CgroupsPath(id string) string { return path.Join("/", r.CgroupParent, id) }

// Context returns the context of a runtime command that changes state: not
// cancelled with ctx, since a runtime killed halfway leaves state that it
// no longer knows, but bounded.
func Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), RuntimeTimeout)
}

// IDs returns the ids of the runtime's containers.
func (r *Runtime) IDs(ctx context.Context) ([]string, error) {
	cs, err := r.Cmd.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s list: %w", r.Name, err)
	}
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// Destroy kills and deletes the runtime's container id. A container the
// runtime does not know is fine; its leftovers are swept.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	rctx, cancel := Context(ctx)
	defer cancel()
	err := r.Cmd.Delete(rctx, id, &gorunc.DeleteOpts{Force: true})
	if err == nil {
		return nil
	}
	// The runtime's error does not say, in a form to rely on, whether
	// the container existed; ask for the list instead.
	ids, lerr := r.IDs(ctx)
	if lerr == nil && !slices.Contains(ids, id) {
		return r.Leftovers(id)
	}
	return fmt.Errorf("%s delete: %w", r.Name, err)
}

// State reports the state of sandbox id from the runtime. A sandbox whose
// container is gone but whose leftovers are not is stopped.
func (r *Runtime) State(ctx context.Context, id string) (backend.State, error) {
	if err := network.ValidateID(id); err != nil {
		return "", err
	}
	c, err := r.Cmd.State(ctx, id)
	if err == nil {
		switch c.Status {
		case "running":
			return backend.StateRunning, nil
		case "paused":
			return backend.StatePaused, nil
		default: // "created" (a Start cut short) or "stopped"
			return backend.StateStopped, nil
		}
	}
	// Only when the runtime keeps no state for id at all is the sandbox
	// known to be gone; any other failure (the runtime killed, out of
	// memory or descriptors, a timeout) is "could not tell", and the
	// engine must keep the sandbox rather than kill it on a guess.
	if known, kerr := r.Knows(id); kerr != nil || known {
		return "", fmt.Errorf("sandbox %q: could not tell its state: %w", id, errors.Join(err, kerr))
	}
	held, herr := r.holds(ctx, id)
	if herr != nil {
		return "", fmt.Errorf("sandbox %q: state: %w", id, errors.Join(err, herr))
	}
	if held {
		return backend.StateStopped, nil
	}
	return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// holds reports whether the backend has anything at all for id.
func (r *Runtime) holds(ctx context.Context, id string) (bool, error) {
	if _, err := os.Stat(r.BundleDir(id)); err == nil {
		return true, nil
	}
	if _, err := os.Stat(r.Pool.NetNSPath(id)); err == nil {
		return true, nil
	}
	if _, err := r.Pool.Lookup(id); err == nil {
		return true, nil
	}
	ids, err := r.IDs(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, id), nil
}

// List returns every id with a bundle directory, a container or a network
// leftover in this backend.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	entries, err := os.ReadDir(r.Sandboxes)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	for _, e := range entries {
		set[e.Name()] = true
	}
	ids, err := r.IDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	more, err := r.Pool.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	for _, id := range append(ids, more...) {
		set[id] = true
	}
	out := make([]string, 0, len(set))
	for id := range set {
		if network.ValidateID(id) == nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// StopWith kills sandbox id and removes all of it: the container and its
// runtime state, any process left in its cgroup, the cgroup, what unmount
// takes down of the bundle, the network and the bundle directory. The
// caller holds id's lock. The bundle directory goes last and only when the
// rest is gone, so that a failed stop can be retried and List still
// reports the id.
func (r *Runtime) StopWith(ctx context.Context, id string, unmount func(dir string) error) error {
	begin := time.Now()
	dir := r.BundleDir(id)
	_, statErr := os.Stat(dir)
	owned := statErr == nil
	var errs []error
	if err := r.Destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	// The runtime removes the cgroup; this sweeps a crash's leftovers.
	// Only when the bundle says the cgroup is ours: another backend root
	// may run a sandbox of the same id.
	if owned {
		if err := RemoveCgroup(r.CgroupsPath(id)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmount(dir); err != nil {
		errs = append(errs, err)
	}
	if err := r.Pool.Teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := RemoveBundle(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.Log.Warn("stop incomplete", "sandbox", id, "op", "stop", "err", err)
		return fmt.Errorf("sandbox %q: stop: %w", id, err)
	}
	if owned {
		r.Log.Info("sandbox stopped", "sandbox", id, "op", "stop", "took", time.Since(begin))
	}
	return nil
}

// Pause freezes sandbox id. It fails with errdefs.ErrNotFound for an
// unknown id and errdefs.ErrFailedPrecondition unless the sandbox runs.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.transition(ctx, id, "pause", backend.StateRunning, r.Cmd.Pause)
}

// Resume thaws sandbox id. It fails with errdefs.ErrNotFound for an
// unknown id and errdefs.ErrFailedPrecondition unless the sandbox is
// paused.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	return r.transition(ctx, id, "resume", backend.StatePaused, r.Cmd.Resume)
}

func (r *Runtime) transition(ctx context.Context, id, op string, from backend.State, do func(context.Context, string) error) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer r.Locks.Lock(id)()
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	if st != from {
		return fmt.Errorf("sandbox %q: %s: sandbox is %s: %w", id, op, st, errdefs.ErrFailedPrecondition)
	}
	rctx, cancel := Context(ctx)
	defer cancel()
	if err := do(rctx, id); err != nil {
		return fmt.Errorf("sandbox %q: %s %s: %w", id, r.Name, op, err)
	}
	r.Log.Info("sandbox "+op+"d", "sandbox", id, "op", op)
	return nil
}

// Stats reports sandbox id's resource use as the runtime's events --stats
// reads it, with the memory limit it was started with.
func (r *Runtime) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return nil, err
	}
	if st != backend.StateRunning {
		return nil, fmt.Errorf("sandbox %q: stats: sandbox is %s: %w", id, st, errdefs.ErrFailedPrecondition)
	}
	s, err := r.stats(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %s events: %w", id, r.Name, err)
	}
	return &backend.Stats{
		CPUUsageNanos:    s.Cpu.Usage.Total,
		MemoryUsageBytes: s.Memory.Usage.Usage,
		MemoryLimitBytes: r.MemoryLimit(id),
		Pids:             s.Pids.Current,
	}, nil
}

// stats runs `<runtime> events --stats id` and decodes its one event. It
// does not use go-runc's Stats, whose reader of the command's output can
// be closed by the command's end before it has read ("file already
// closed"), which a loaded host turns into failed stats.
func (r *Runtime) stats(ctx context.Context, id string) (*gorunc.Stats, error) {
	args := append([]string{"--root", r.Cmd.Root}, r.Cmd.ExtraArgs...)
	args = append(args, "events", "--stats", id)
	out, err := exec.CommandContext(ctx, r.Cmd.Command, args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
		}
		return nil, err
	}
	var e gorunc.Event
	if err := json.Unmarshal(out, &e); err != nil {
		return nil, fmt.Errorf("its output %.200q: %w", out, err)
	}
	if e.Stats == nil {
		return nil, fmt.Errorf("its event holds no stats: %.200q", out)
	}
	return e.Stats, nil
}

// Wait implements backend.Waiter: it blocks until the sandbox's process,
// whose pid is in the bundle's pidFile, exits.
func (r *Runtime) Wait(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	pid, err := ReadPid(filepath.Join(r.BundleDir(id), PidFile))
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: %w: %v", id, errdefs.ErrNotFound, err)
	}
	return WaitProcess(ctx, pid, id)
}

// PidFile is the file in a bundle that holds the pid of the sandbox's
// runtime process.
const PidFile = "pid"

// WithNetwork returns spec with what the agent needs to know of the
// sandbox's network, in the variables of backend.EnvNameserver and its
// kin: its resolver (the host side of the veth, where the egress DNS
// server answers), its own address for /etc/hosts, and the egress CA.
// spec is not modified.
func (r *Runtime) WithNetwork(spec *backend.Spec, ep *network.Endpoint) *backend.Spec {
	out := *spec
	out.Env = append(slices.Clone(spec.Env),
		backend.EnvNameserver+"="+ep.HostAddr.Addr().String(),
		backend.EnvSandboxAddr+"="+ep.SandboxAddr.Addr().String())
	if r.Egress != nil {
		out.Env = append(out.Env, backend.EnvTrustCA+"="+string(r.Egress.CACertPEM()))
	}
	return &out
}

// Close stops the backend's egress services (the sandboxes' resolver and
// egress proxy). Sandboxes keep running; their lookups and proxied
// connections fail at once until a new backend on the same root serves
// them again.
func (r *Runtime) Close() error {
	if r.Egress == nil {
		return nil
	}
	return r.Egress.Close()
}

// UpdateNetwork implements backend.NetworkUpdater.
func (r *Runtime) UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer r.Locks.Lock(id)()
	return r.Pool.UpdatePolicy(ctx, id, policy)
}

// NetworkDenials implements backend.NetworkObserver.
func (r *Runtime) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	if _, err := r.Pool.Lookup(id); err != nil {
		return nil, err
	}
	return r.Pool.Denials(id), nil
}
