package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	runc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/network"
)

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Pauser      = (*Backend)(nil)
	_ backend.StatsReader = (*Backend)(nil)
)

const (
	// cleanupTimeout bounds the undo of a failed Start, which runs even
	// when the Start's ctx is done.
	cleanupTimeout = 30 * time.Second
	// runscTimeout bounds one runsc command that changes state.
	runscTimeout = time.Minute
	// minDiskBytes is the smallest disk cap: the agent's first writes
	// (resolv.conf, hosts, the trust store, the user's home) must fit.
	minDiskBytes = 32 << 20
)

// Files in a sandbox's bundle directory.
const (
	specFile   = "config.json"
	recordFile = "sandbox.json"
	pidFile    = "pid"
	rootfsDir  = "rootfs" // the host overlay of the image, runsc's root
	overlayDir = "ovl"    // upper and work dirs of that overlay
	upperDir   = "upper"  // runsc's overlay filestore goes here
)

// Backend runs sandboxes with runsc. It is safe for concurrent use; calls
// for one id are serialized.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	runsc     *runc.Runc
	pool      *network.Pool
	egress    *network.Egress // nil when sandboxes have no egress
	sandboxes string
	limitSwap bool
	pids      *pidBudget
	locks     oci.IDLocks
	// foreign finds the runsc commands an earlier process left running.
	foreign foreignRunsc
}

// New makes a Backend from cfg: it fills in defaults, finds runsc and makes
// the directories under cfg.Root. It fails with errdefs.ErrInvalidArgument
// for a bad cfg and errdefs.ErrUnavailable when runsc is missing.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var err error
	if cfg.RunscPath == "" {
		cfg.RunscPath, err = FindRunsc()
	} else {
		cfg.RunscPath, err = checkExecutable(cfg.RunscPath)
	}
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(cfg.Root, "runsc")
	sandboxes := filepath.Join(cfg.Root, "sandboxes")
	for _, d := range []string{cfg.Root, stateDir, sandboxes, cfg.SharedRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	pids, err := newPidBudget(cfg)
	if err != nil {
		return nil, err
	}
	pool, egress, err := oci.OpenNetwork(cfg.Network, cfg.Egress, cfg.IPv6, network.DefaultIPv6Subnet)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	flags := []string{"--platform=" + cfg.Platform, "--network=sandbox", "--shared-root=" + cfg.SharedRoot}
	if cfg.Debug {
		debugDir := filepath.Join(cfg.Root, "debug")
		if err := os.MkdirAll(debugDir, 0o700); err != nil {
			if egress != nil {
				egress.Close()
			}
			return nil, fmt.Errorf("gvisor: %w", err)
		}
		flags = append(flags, "--debug-log="+debugDir+"/")
	}
	flags = append(flags, cfg.RunscFlags...)
	return &Backend{
		cfg: cfg,
		log: cfg.Logger.With("backend", "gvisor"),
		runsc: &runc.Runc{
			Command: cfg.RunscPath,
			Root:    stateDir,
			Debug:   cfg.Debug,
			// A signal to the daemon's process group must not hit runsc
			// halfway through a command.
			Setpgid:   true,
			ExtraArgs: flags,
		},
		pool:      pool,
		egress:    egress,
		sandboxes: sandboxes,
		limitSwap: oci.SwapLimitable(),
		pids:      pids,
		foreign:   foreignRunsc{since: time.Now()},
	}, nil
}

func (b *Backend) bundleDir(id string) string { return filepath.Join(b.sandboxes, id) }

// record is what the backend keeps about a running sandbox, in
// <bundle>/sandbox.json.
type record struct {
	backend.Sandbox
	Limits    limits            `json:"limits"`
	DiskBytes int64             `json:"diskBytes,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Start boots spec as described by backend.Backend. Its steps are: claim
// the bundle directory and mount the root overlay, make the network, write
// the OCI spec, runsc create and runsc start; a failure undoes the steps
// done, in reverse. ctx is checked between the runsc steps but does not
// interrupt them (see runscContext), so Start may outlive ctx by one step.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (_ *backend.Sandbox, retErr error) {
	if spec == nil {
		return nil, fmt.Errorf("gvisor start: nil spec: %w", errdefs.ErrInvalidArgument)
	}
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	id := spec.ID
	defer b.locks.Lock(id)()
	log := b.log.With("sandbox", id, "op", "start")
	begin := time.Now()
	step := func(name string, since time.Time) { log.Debug("step done", "step", name, "took", time.Since(since)) }

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

	// Claim: the bundle directory marks the id as this backend's.
	t := time.Now()
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
		// Someone else's sandbox of this id (another Root) owns the cgroup.
		return nil, fmt.Errorf("sandbox %q: cgroup %s in use (%v): %w", id, cgPath, err, errdefs.ErrAlreadyExists)
	}
	if err := os.Mkdir(filepath.Join(dir, upperDir), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Add(func() error { return unmountRootFS(dir) })
	if err := mountHostSafe(dir); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := oci.MountLog(dir); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	rootfs, err := mountRootFS(spec.RootFS, dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	step("claim", t)

	// Admission: the host tasks this sandbox may hold must fit beside
	// every other sandbox's. The reservation bridges the time until
	// runsc makes the cgroup, which then carries it.
	lim := resolveLimits(&b.cfg, spec.Resources)
	release, err := b.pids.reserve(cgPath, lim.hostPids())
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	defer release()

	t = time.Now()
	ep, err := b.pool.Setup(ctx, id, spec.Network)
	if err != nil {
		return nil, err
	}
	undo.Add(func() error {
		c, cancel := cleanupCtx()
		defer cancel()
		return b.pool.Teardown(c, id)
	})
	step("network", t)

	ociSpec := buildSpec(specInput{
		Spec:        b.withNetwork(spec, ep),
		RootPath:    rootfs,
		Limits:      lim,
		NetNSPath:   ep.NetNSPath,
		CgroupsPath: cgPath,
		LimitSwap:   b.limitSwap,
	})
	if err := oci.WriteJSON(filepath.Join(dir, specFile), ociSpec); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	t = time.Now()
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
	// runsc steps are not cut short by ctx: a runsc create killed halfway
	// leaves processes and state files that runsc itself no longer knows.
	// ctx is checked between the steps instead.
	rctx, rcancel := runscContext(ctx)
	defer rcancel()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %q: before runsc create: %w", id, context.Cause(ctx))
	}
	create := *b.runsc
	create.ExtraArgs = append(slices.Clip(b.runsc.ExtraArgs), overlayFlag(dir, b.diskBytes(spec.Resources)))
	err = create.Create(rctx, id, dir, &runc.CreateOpts{
		IO:      oci.FileIO{F: console},
		PidFile: filepath.Join(dir, pidFile),
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: runsc create: %w: %s", id, err, oci.Tail(oci.ConsolePath(dir), 2048))
	}
	step("create", t)
	// runsc has shown the sandbox its memory limit; the host's sits a
	// headroom above (see hostMemory).
	if err := setHostMemory(cgPath, lim.hostMemory()); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := b.pids.limitParent(); err != nil {
		log.Warn("cannot cap the host tasks of all sandboxes together", "err", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %q: after runsc create: %w", id, context.Cause(ctx))
	}

	t = time.Now()
	if err := b.runsc.Start(rctx, id); err != nil {
		return nil, fmt.Errorf("sandbox %q: runsc start: %w", id, err)
	}
	step("start", t)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %q: after runsc start: %w", id, context.Cause(ctx))
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
	if err := oci.WriteJSON(filepath.Join(dir, recordFile), record{Sandbox: sb, Limits: lim, DiskBytes: b.diskBytes(spec.Resources), Labels: spec.Labels}); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	undo.Release()
	log.Info("sandbox started", "addr", sb.AgentAddr, "pid", pid, "took", time.Since(begin))
	return &sb, nil
}

// overlayFlag returns the runsc flag that gives the sandbox its
// copy-on-write root, capped at diskBytes; see rootfs_linux.go for the host
// overlay under it.
//
// runsc's --overlay2=root:dir=<dir> puts a gVisor overlay over the root:
// the root (here the host overlay of the image) is the read-only lower
// layer, served by the gofer, and the upper layer is a tmpfs inside the
// sentry whose pages live in a file that runsc makes in <dir> and unlinks
// at once. So the sandbox's writes never leave the sandbox, no copy of the
// image is made, the upper layer is on disk (page cache that the kernel
// can write back, not anonymous memory that a big file would pin), file
// operations stay inside the sentry rather than crossing to the gofer, and
// the layer vanishes with the sandbox.
//
// size= is that tmpfs's size: the sentry counts the pages of the files in
// the upper layer (the sandbox's writes and the copies up of image files it
// changes) and a write past it fails with ENOSPC, inside the sandbox; the
// host's file grows no larger. /tmp is part of the root (see
// tmpPlaceholder), so one cap holds both.
//
// The alternatives: root:memory keeps every written byte in memory.
// root:self (runsc's default) writes its filestore into the root directory
// itself: on a bare image directory that is the shared image; on the host
// overlay it would land in the overlay's upper dir and work, but as a named
// file for the sandbox's whole life rather than one unlinked at once in a
// place of our choosing. The host overlayfs alone (runsc's overlay off, the
// sandbox writing to the overlay's upper dir) works too, but sends every
// file operation out of the sentry to the host, stores the sandbox's files
// on the host under their in-sandbox owners and modes, and has no cap short
// of a quota on the host's file system.
func overlayFlag(dir string, diskBytes int64) string {
	return "--overlay2=root:dir=" + filepath.Join(dir, upperDir) + ",size=" + strconv.FormatInt(diskBytes, 10)
}

// diskBytes is the disk cap of a sandbox with resources r.
func (b *Backend) diskBytes(r backend.Resources) int64 {
	if r.DiskBytes != 0 {
		return r.DiskBytes
	}
	return b.cfg.DefaultDiskBytes
}

// validateSpec checks spec before anything is made.
func validateSpec(s *backend.Spec) error {
	if err := network.ValidateID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.RootFS) {
		return fmt.Errorf("sandbox %q: RootFS %q must be absolute: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if overlayUnsafe(s.RootFS) {
		return fmt.Errorf("sandbox %q: RootFS %q holds ',', ':' or '\\', which overlayfs cannot take: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
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
	if r.CPUs < 0 || r.MemoryBytes < 0 || r.Pids < 0 || r.DiskBytes < 0 {
		return fmt.Errorf("sandbox %q: negative resources %+v: %w", s.ID, r, errdefs.ErrInvalidArgument)
	}
	if r.MemoryBytes != 0 && r.MemoryBytes < 64<<20 {
		return fmt.Errorf("sandbox %q: memory limit %d is below 64 MiB, too small for the sentry: %w", s.ID, r.MemoryBytes, errdefs.ErrInvalidArgument)
	}
	if r.DiskBytes != 0 && r.DiskBytes < minDiskBytes {
		return fmt.Errorf("sandbox %q: disk cap %d is below %d MiB: %w", s.ID, r.DiskBytes, minDiskBytes>>20, errdefs.ErrInvalidArgument)
	}
	if r.CPUs != 0 && r.CPUs < 0.01 {
		return fmt.Errorf("sandbox %q: %v CPUs is below 0.01: %w", s.ID, r.CPUs, errdefs.ErrInvalidArgument)
	}
	for _, kv := range s.Env {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("sandbox %q: env entry %q is not KEY=VALUE: %w", s.ID, kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Stop kills sandbox id and removes all of it: runsc's container and
// state, any process left in its cgroup, the cgroup, the network and the
// bundle directory. It is idempotent. The bundle directory goes last and
// only when the rest is gone, so a failed Stop can be retried and List
// still reports the id.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.locks.Lock(id)()
	begin := time.Now()
	// A runsc command of a daemon that died mid-Start (or mid-Stop) may
	// still run on id; cleaning up under it would leave what it makes.
	b.waitForeignRunsc(ctx, id)
	dir := b.bundleDir(id)
	_, statErr := os.Stat(dir)
	owned := statErr == nil

	var errs []error
	if err := b.destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	// runsc removes the cgroup; this sweeps a crash's leftovers. Only
	// when the bundle says the cgroup is ours: another backend root may
	// run a sandbox of the same id.
	if owned {
		if err := oci.RemoveCgroup(cgroupsPath(b.cfg.CgroupParent, id)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountRootFS(dir); err != nil {
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

// runscContext returns the context for a runsc command that changes state:
// not cancelled with ctx, since runsc killed halfway leaves a mess, but
// bounded.
func runscContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), runscTimeout)
}

// destroy kills and deletes runsc's container id; runsc also removes its
// cgroup. A container runsc does not know is fine.
func (b *Backend) destroy(ctx context.Context, id string) error {
	rctx, cancel := runscContext(ctx)
	defer cancel()
	err := b.runsc.Delete(rctx, id, &runc.DeleteOpts{Force: true})
	if err == nil {
		return nil
	}
	// runsc's error does not say, in a form to rely on, whether the
	// container existed; ask for the list instead.
	ids, lerr := b.runscIDs(ctx)
	if lerr == nil && !slices.Contains(ids, id) {
		return b.removeRunscLeftovers(id)
	}
	return fmt.Errorf("runsc delete: %w", err)
}

// removeRunscLeftovers removes what a runsc create cut short (killed with
// its ctx, say) leaves in the state dir without registering the container:
// its lock and socket files. The names follow runsc's layout:
// <container>_sandbox:<sandbox>.{state,lock} and runsc-<sandbox>.sock; the
// container is its own sandbox here, and ids hold no '_' or '.', so the
// patterns match this id only.
func (b *Backend) removeRunscLeftovers(id string) error {
	var errs []error
	for _, pattern := range []string{id + "_sandbox:*", "*_sandbox:" + id + ".*", "runsc-" + id + ".sock"} {
		matches, err := filepath.Glob(filepath.Join(b.runsc.Root, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// runscIDs returns the ids of the containers in this backend's runsc root.
func (b *Backend) runscIDs(ctx context.Context) ([]string, error) {
	cs, err := b.runsc.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// State reports the state of sandbox id from runsc. A sandbox whose runsc
// container is gone but whose leftovers are not is stopped.
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	if err := network.ValidateID(id); err != nil {
		return "", err
	}
	c, err := b.runsc.State(ctx, id)
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
	// runsc failed. Only when it has no state for id at all is the
	// sandbox known to be gone; any other failure (runsc killed, out of
	// memory or descriptors, a timeout) is "could not tell", and the
	// engine must keep the sandbox rather than kill it on a guess.
	if known, kerr := b.runscKnows(id); kerr != nil || known {
		return "", fmt.Errorf("sandbox %q: could not tell its state: %w", id, errors.Join(err, kerr))
	}
	held, herr := b.holds(ctx, id)
	if herr != nil {
		return "", fmt.Errorf("sandbox %q: state: %w", id, errors.Join(err, herr))
	}
	if held {
		return backend.StateStopped, nil
	}
	return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// runscKnows reports whether runsc keeps state for sandbox id: its state
// file, "<container>_sandbox:<sandbox>.state" in runsc's root.
func (b *Backend) runscKnows(id string) (bool, error) {
	_, err := os.Stat(filepath.Join(b.runsc.Root, id+"_sandbox:"+id+".state"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// holds reports whether the backend has anything at all for id.
func (b *Backend) holds(ctx context.Context, id string) (bool, error) {
	if _, err := os.Stat(b.bundleDir(id)); err == nil {
		return true, nil
	}
	if _, err := os.Stat(b.pool.NetNSPath(id)); err == nil {
		return true, nil
	}
	if _, err := b.pool.Lookup(id); err == nil {
		return true, nil
	}
	ids, err := b.runscIDs(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, id), nil
}

// List returns every id with a bundle directory, a runsc container or a
// network leftover in this backend's Root.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	entries, err := os.ReadDir(b.sandboxes)
	if err != nil {
		return nil, fmt.Errorf("gvisor list: %w", err)
	}
	for _, e := range entries {
		set[e.Name()] = true
	}
	ids, err := b.runscIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("gvisor list: %w", err)
	}
	for _, id := range ids {
		set[id] = true
	}
	ids, err = b.pool.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("gvisor list: %w", err)
	}
	for _, id := range ids {
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
