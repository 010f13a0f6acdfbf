package runc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	gorunc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/network"
)

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.Pauser          = (*Backend)(nil)
	_ backend.StatsReader     = (*Backend)(nil)
	_ backend.Waiter          = (*Backend)(nil)
	_ backend.NetworkUpdater  = (*Backend)(nil)
	_ backend.NetworkObserver = (*Backend)(nil)
)

const (
	// cleanupTimeout bounds the undo of a failed Start.
	cleanupTimeout = 30 * time.Second
	// runcTimeout bounds one runc command that changes state.
	runcTimeout = time.Minute
	// minDiskBytes is the smallest disk cap: the agent's first writes
	// and ext4's own metadata must fit.
	minDiskBytes = 32 << 20
)

// Files in a sandbox's bundle directory.
const (
	specFile   = "config.json"
	recordFile = "sandbox.json"
	pidFile    = "pid"
)

// Backend runs sandboxes with runc. It is safe for concurrent use; calls for
// one id are serialized.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	runc      *gorunc.Runc
	pool      *network.Pool
	egress    *network.Egress
	sandboxes string
	roots     string
	limitSwap bool
	locks     oci.IDLocks
}

// New makes a Backend from cfg: it fills in defaults, finds runc and makes
// the directories under cfg.Root.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var err error
	if cfg.RuncPath == "" {
		cfg.RuncPath, err = FindRunc()
	} else {
		cfg.RuncPath, err = checkExecutable(cfg.RuncPath)
	}
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(cfg.Root, "runc")
	sandboxes := filepath.Join(cfg.Root, "sandboxes")
	for _, d := range []string{cfg.Root, stateDir, sandboxes} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runc backend: %w", err)
		}
	}
	// The roots' directory is named after Root, so that two backends
	// never share one.
	sum := sha256.Sum256([]byte(cfg.Root))
	roots := filepath.Join(cfg.RunDir, hex.EncodeToString(sum[:6]))
	if err := makeRunDir(roots); err != nil {
		return nil, fmt.Errorf("runc backend: %w", err)
	}
	pool, egress, err := oci.OpenNetwork(cfg.Network, cfg.Egress, cfg.IPv6, DefaultIPv6Subnet)
	if err != nil {
		return nil, fmt.Errorf("runc backend: %w", err)
	}
	return &Backend{
		cfg: cfg,
		log: cfg.Logger.With("backend", "runc"),
		runc: &gorunc.Runc{
			Command: cfg.RuncPath,
			Root:    stateDir,
			// A signal to the daemon's process group must not hit runc
			// halfway through a command.
			Setpgid: true,
		},
		pool:      pool,
		egress:    egress,
		sandboxes: sandboxes,
		roots:     roots,
		limitSwap: oci.SwapLimitable(),
	}, nil
}

func (b *Backend) bundleDir(id string) string { return filepath.Join(b.sandboxes, id) }

// rootPath is where sandbox id's root is mounted: under the run directory
// of this backend's Root (see mountRoot).
func (b *Backend) rootPath(id string) string { return filepath.Join(b.roots, id) }

// record is what the backend keeps about a running sandbox.
type record struct {
	backend.Sandbox
	Limits     limits            `json:"limits"`
	HostIDBase uint32            `json:"hostIDBase"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Start boots spec: claim the bundle, make the network (whose address
// block also picks the sandbox's host ids), mount the root, write the
// spec, runc create and start. A failure undoes the steps done.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (_ *backend.Sandbox, retErr error) {
	if spec == nil {
		return nil, fmt.Errorf("runc start: nil spec: %w", errdefs.ErrInvalidArgument)
	}
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	id := spec.ID
	defer b.locks.Lock(id)()
	log := b.log.With("sandbox", id, "op", "start")
	begin := time.Now()
	var undo cleanup.Stack
	defer func() {
		if retErr == nil {
			return
		}
		if err := undo.Run(); err != nil {
			log.Error("undo of a failed start left something behind", "err", err)
			retErr = errors.Join(retErr, fmt.Errorf("cleanup: %w", err))
		}
		log.Info("start failed", "err", retErr, "took", time.Since(begin))
	}()
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	}

	dir := b.bundleDir(id)
	cgPath := cgroupsPath(b.cfg.CgroupParent, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Add(func() error { return oci.RemoveBundle(dir) })
	if dirs, err := oci.CgroupDirs(cgPath); err != nil || len(dirs) > 0 {
		return nil, fmt.Errorf("sandbox %q: cgroup %s in use (%v): %w", id, cgPath, err, errdefs.ErrAlreadyExists)
	}
	undo.Add(func() error { return unmountAll(dir, b.rootPath(id)) })
	if err := oci.MountLog(dir); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	ep, err := b.pool.Setup(ctx, id, spec.Network)
	if err != nil {
		return nil, err
	}
	undo.Add(func() error {
		c, cancel := cleanupCtx()
		defer cancel()
		return b.pool.Teardown(c, id)
	})
	hostBase, err := b.hostIDBase(ep.SandboxAddr)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	lim := resolveLimits(&b.cfg, spec.Resources)
	if err := mountLower(spec.RootFS, dir, hostBase); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := makeDisk(ctx, spec.RootFS, dir, lim.DiskBytes, hostBase); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	rootfs := b.rootPath(id)
	if err := mountRoot(dir, rootfs); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	ociSpec := buildSpec(specInput{
		Spec:        withNetwork(spec, ep, b.egress),
		RootPath:    rootfs,
		Limits:      lim,
		NetNSPath:   ep.NetNSPath,
		CgroupsPath: cgPath,
		HostIDBase:  hostBase,
		LimitSwap:   b.limitSwap,
	})
	if err := oci.WriteJSON(filepath.Join(dir, specFile), ociSpec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	console, err := os.OpenFile(oci.ConsolePath(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	defer console.Close()
	undo.Add(func() error {
		c, cancel := cleanupCtx()
		defer cancel()
		return errors.Join(b.destroy(c, id), oci.RemoveCgroup(cgPath))
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %q: before runc create: %w", id, context.Cause(ctx))
	}
	// runc commands are not cut short by ctx: one killed halfway leaves
	// state that runc itself no longer knows.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), runcTimeout)
	defer rcancel()
	if err := b.runc.Create(rctx, id, dir, &gorunc.CreateOpts{IO: oci.FileIO{F: console}, PidFile: filepath.Join(dir, pidFile)}); err != nil {
		return nil, fmt.Errorf("sandbox %q: runc create: %w: %s", id, err, oci.Tail(oci.ConsolePath(dir), 2048))
	}
	if err := b.runc.Start(rctx, id); err != nil {
		return nil, fmt.Errorf("sandbox %q: runc start: %w: %s", id, err, oci.Tail(oci.ConsolePath(dir), 2048))
	}
	pid, err := oci.ReadPid(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	sb := backend.Sandbox{
		ID:        id,
		AgentAddr: net.JoinHostPort(ep.SandboxAddr.Addr().String(), strconv.Itoa(backend.AgentPort)),
		Pid:       pid,
		StartedAt: time.Now().UTC(),
	}
	if err := oci.WriteJSON(filepath.Join(dir, recordFile), record{Sandbox: sb, Limits: lim, HostIDBase: hostBase, Labels: spec.Labels}); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Release()
	log.Info("sandbox started", "addr", sb.AgentAddr, "pid", pid, "took", time.Since(begin))
	return &sb, nil
}

// hostIDBase is the first host id of the sandbox whose address is addr:
// its /30 block's slot (see idRange).
func (b *Backend) hostIDBase(addr netip.Prefix) (uint32, error) {
	subnet := b.cfg.Network.Subnet.Masked()
	a, s := addr.Addr().As4(), subnet.Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3]))
	slot := off / 4
	if !subnet.Contains(addr.Addr()) || slot >= 1<<14 {
		return 0, fmt.Errorf("address %s is outside the pool %s", addr, subnet)
	}
	return idBase + slot*idCount, nil
}

// withNetwork returns spec with what the agent needs to know of the
// sandbox's network (see backend.EnvNameserver).
func withNetwork(spec *backend.Spec, ep *network.Endpoint, egress *network.Egress) *backend.Spec {
	out := *spec
	out.Env = append(slices.Clone(spec.Env),
		backend.EnvNameserver+"="+ep.HostAddr.Addr().String(),
		backend.EnvSandboxAddr+"="+ep.SandboxAddr.Addr().String())
	if egress != nil {
		out.Env = append(out.Env, backend.EnvTrustCA+"="+string(egress.CACertPEM()))
	}
	return &out
}

// validateSpec checks spec before anything is made.
func validateSpec(s *backend.Spec) error {
	if err := network.ValidateID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.RootFS) || strings.ContainsAny(s.RootFS, ",:\\") {
		return fmt.Errorf("sandbox %q: RootFS %q must be absolute, without ',', ':' or '\\': %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(s.RootFS); err != nil {
		return fmt.Errorf("sandbox %q: RootFS: %w: %w", s.ID, errdefs.ErrNotFound, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("sandbox %q: RootFS %s is not a directory: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(s.Agent.Path) {
		return fmt.Errorf("sandbox %q: agent path %q must be absolute: %w", s.ID, s.Agent.Path, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(s.Agent.Path); err != nil {
		return fmt.Errorf("sandbox %q: agent: %w: %w", s.ID, errdefs.ErrNotFound, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("sandbox %q: agent %s is not a regular file: %w", s.ID, s.Agent.Path, errdefs.ErrInvalidArgument)
	}
	r := s.Resources
	switch {
	case r.CPUs < 0 || r.MemoryBytes < 0 || r.Pids < 0 || r.DiskBytes < 0:
		return fmt.Errorf("sandbox %q: negative resources %+v: %w", s.ID, r, errdefs.ErrInvalidArgument)
	case r.MemoryBytes != 0 && r.MemoryBytes < 16<<20:
		return fmt.Errorf("sandbox %q: memory limit %d is below 16 MiB: %w", s.ID, r.MemoryBytes, errdefs.ErrInvalidArgument)
	case r.DiskBytes != 0 && r.DiskBytes < minDiskBytes:
		return fmt.Errorf("sandbox %q: disk cap %d is below %d MiB: %w", s.ID, r.DiskBytes, minDiskBytes>>20, errdefs.ErrInvalidArgument)
	case r.CPUs != 0 && r.CPUs < 0.01:
		return fmt.Errorf("sandbox %q: %v CPUs is below 0.01: %w", s.ID, r.CPUs, errdefs.ErrInvalidArgument)
	case r.Pids != 0 && r.Pids < 16:
		return fmt.Errorf("sandbox %q: a limit of %d tasks is below 16: %w", s.ID, r.Pids, errdefs.ErrInvalidArgument)
	}
	for _, kv := range s.Env {
		if !strings.Contains(kv, "=") || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("sandbox %q: env entry %q is not KEY=VALUE: %w", s.ID, kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Stop kills sandbox id and removes all of it. It is idempotent; the
// bundle directory goes last and only when the rest is gone.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	begin := time.Now()
	dir := b.bundleDir(id)
	_, statErr := os.Stat(dir)
	owned := statErr == nil
	var errs []error
	if err := b.destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if owned {
		if err := oci.RemoveCgroup(cgroupsPath(b.cfg.CgroupParent, id)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountAll(dir, b.rootPath(id)); err != nil {
		errs = append(errs, err)
	}
	if err := b.pool.Teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := oci.RemoveBundle(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.log.Warn("stop incomplete", "sandbox", id, "op", "stop", "err", err)
		return fmt.Errorf("sandbox %q: stop: %w", id, err)
	}
	if owned {
		b.log.Info("sandbox stopped", "sandbox", id, "op", "stop", "took", time.Since(begin))
	}
	return nil
}

// destroy kills and deletes runc's container id. A container runc does not
// know is fine.
func (b *Backend) destroy(ctx context.Context, id string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runcTimeout)
	defer cancel()
	err := b.runc.Delete(rctx, id, &gorunc.DeleteOpts{Force: true})
	if err == nil {
		return nil
	}
	ids, lerr := b.runcIDs(ctx)
	if lerr == nil && !slices.Contains(ids, id) {
		// runc's own leftover of a create cut short: its state dir.
		return os.RemoveAll(filepath.Join(b.runc.Root, id))
	}
	return fmt.Errorf("runc delete: %w", err)
}

// runcIDs returns the ids of the containers in this backend's runc root.
func (b *Backend) runcIDs(ctx context.Context) ([]string, error) {
	cs, err := b.runc.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("runc list: %w", err)
	}
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// State reports the state of sandbox id from runc.
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	if err := network.ValidateID(id); err != nil {
		return "", err
	}
	c, err := b.runc.State(ctx, id)
	if err == nil {
		switch c.Status {
		case "running":
			return backend.StateRunning, nil
		case "paused":
			return backend.StatePaused, nil
		default:
			return backend.StateStopped, nil
		}
	}
	// Only when runc keeps no state for id is the sandbox known to be
	// gone; any other failure is "could not tell".
	if _, serr := os.Stat(filepath.Join(b.runc.Root, id, "state.json")); serr == nil || !errors.Is(serr, fs.ErrNotExist) {
		return "", fmt.Errorf("sandbox %q: could not tell its state: %w", id, errors.Join(err, serr))
	}
	if b.holds(id) {
		return backend.StateStopped, nil
	}
	return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// holds reports whether the backend has anything for id.
func (b *Backend) holds(id string) bool {
	for _, p := range []string{b.bundleDir(id), b.pool.NetNSPath(id), filepath.Join(b.runc.Root, id)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	_, err := b.pool.Lookup(id)
	return err == nil
}

// List returns every id with a bundle, a runc container or a network
// leftover in this backend's Root.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	entries, err := os.ReadDir(b.sandboxes)
	if err != nil {
		return nil, fmt.Errorf("runc list: %w", err)
	}
	for _, e := range entries {
		set[e.Name()] = true
	}
	ids, err := b.runcIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("runc backend list: %w", err)
	}
	more, err := b.pool.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("runc backend list: %w", err)
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

// Pause freezes sandbox id.
func (b *Backend) Pause(ctx context.Context, id string) error {
	return b.transition(ctx, id, "pause", backend.StateRunning, b.runc.Pause)
}

// Resume thaws sandbox id.
func (b *Backend) Resume(ctx context.Context, id string) error {
	return b.transition(ctx, id, "resume", backend.StatePaused, b.runc.Resume)
}

func (b *Backend) transition(ctx context.Context, id, op string, from backend.State, do func(context.Context, string) error) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	st, err := b.State(ctx, id)
	if err != nil {
		return err
	}
	if st != from {
		return fmt.Errorf("sandbox %q: %s: sandbox is %s: %w", id, op, st, errdefs.ErrFailedPrecondition)
	}
	if err := do(ctx, id); err != nil {
		return fmt.Errorf("sandbox %q: runc %s: %w", id, op, err)
	}
	return nil
}

// Stats reports sandbox id's resource use from its cgroup, as runc events
// --stats reads it.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	st, err := b.State(ctx, id)
	if err != nil {
		return nil, err
	}
	if st != backend.StateRunning {
		return nil, fmt.Errorf("sandbox %q: stats: sandbox is %s: %w", id, st, errdefs.ErrFailedPrecondition)
	}
	s, err := b.runc.Stats(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: runc events: %w", id, err)
	}
	out := &backend.Stats{CPUUsageNanos: s.Cpu.Usage.Total, MemoryUsageBytes: s.Memory.Usage.Usage, Pids: s.Pids.Current}
	if rec, err := b.readRecord(id); err == nil {
		out.MemoryLimitBytes = uint64(rec.Limits.MemoryBytes)
	}
	return out, nil
}

func (b *Backend) readRecord(id string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(b.bundleDir(id), recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Wait implements backend.Waiter: it blocks until the sandbox's first
// process (the agent) exits.
func (b *Backend) Wait(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	pid, err := oci.ReadPid(filepath.Join(b.bundleDir(id), pidFile))
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: %w: %v", id, errdefs.ErrNotFound, err)
	}
	return oci.WaitProcess(ctx, pid, id)
}

// Close stops the backend's egress services. Sandboxes keep running.
func (b *Backend) Close() error {
	if b.egress == nil {
		return nil
	}
	return b.egress.Close()
}

// UpdateNetwork implements backend.NetworkUpdater.
func (b *Backend) UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	return b.pool.UpdatePolicy(ctx, id, policy)
}

// NetworkDenials implements backend.NetworkObserver.
func (b *Backend) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	if _, err := b.pool.Lookup(id); err != nil {
		return nil, err
	}
	return b.pool.Denials(id), nil
}
