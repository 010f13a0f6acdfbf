package runc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	gorunc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
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
)

// Files in a sandbox's bundle directory.
const (
	specFile   = "config.json"
	recordFile = "sandbox.json"
)

// Backend runs sandboxes with runc. It is safe for concurrent use; calls for
// one id are serialized. What runc does as runsc does (state, list, stop,
// pause, stats, network) is oci.Runtime's.
type Backend struct {
	*oci.Runtime
	cfg       Config
	roots     string
	limitSwap bool
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
	b := &Backend{cfg: cfg, roots: roots, limitSwap: oci.SwapLimitable()}
	b.Runtime = &oci.Runtime{
		Name: "runc",
		Cmd: &gorunc.Runc{
			Command: cfg.RuncPath,
			Root:    stateDir,
			// A signal to the daemon's process group must not hit runc
			// halfway through a command.
			Setpgid: true,
		},
		Sandboxes:    sandboxes,
		CgroupParent: cfg.CgroupParent,
		Pool:         pool,
		Egress:       egress,
		Log:          cfg.Logger.With("backend", "runc"),
		Knows:        b.runcKnows,
		Leftovers:    b.runcLeftovers,
		MemoryLimit:  b.memoryLimit,
	}
	return b, nil
}

// runcKnows reports whether runc keeps state for container id: its state
// directory under runc's root.
func (b *Backend) runcKnows(id string) (bool, error) {
	_, err := os.Stat(filepath.Join(b.Cmd.Root, id, "state.json"))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// runcLeftovers removes what a runc create cut short leaves: its state
// directory.
func (b *Backend) runcLeftovers(id string) error {
	return os.RemoveAll(filepath.Join(b.Cmd.Root, id))
}

// memoryLimit is the memory limit sandbox id was started with.
func (b *Backend) memoryLimit(id string) uint64 {
	data, err := os.ReadFile(filepath.Join(b.BundleDir(id), recordFile))
	if err != nil {
		return 0
	}
	var r record
	if json.Unmarshal(data, &r) != nil {
		return 0
	}
	return uint64(r.Limits.MemoryBytes)
}

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
	if err := oci.ValidateSpec(spec, floors); err != nil {
		return nil, err
	}
	id := spec.ID
	defer b.Locks.Lock(id)()
	log := b.Log.With("sandbox", id, "op", "start")
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

	dir := b.BundleDir(id)
	cgPath := b.CgroupsPath(id)
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

	ep, err := b.Pool.Setup(ctx, id, spec.Network)
	if err != nil {
		return nil, err
	}
	undo.Add(func() error {
		c, cancel := cleanupCtx()
		defer cancel()
		return b.Pool.Teardown(c, id)
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
		Spec:        b.WithNetwork(spec, ep),
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
		return errors.Join(b.Destroy(c, id), oci.RemoveCgroup(cgPath))
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %q: before runc create: %w", id, context.Cause(ctx))
	}
	// runc commands are not cut short by ctx (see oci.Context).
	rctx, rcancel := oci.Context(ctx)
	defer rcancel()
	if err := b.Cmd.Create(rctx, id, dir, &gorunc.CreateOpts{IO: oci.FileIO{F: console}, PidFile: filepath.Join(dir, oci.PidFile)}); err != nil {
		return nil, fmt.Errorf("sandbox %q: runc create: %w: %s", id, err, oci.Tail(oci.ConsolePath(dir), 2048))
	}
	if err := b.Cmd.Start(rctx, id); err != nil {
		return nil, fmt.Errorf("sandbox %q: runc start: %w: %s", id, err, oci.Tail(oci.ConsolePath(dir), 2048))
	}
	pid, err := oci.ReadPid(filepath.Join(dir, oci.PidFile))
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

// floors are the smallest limits a runc sandbox takes: the agent's first
// writes and ext4's own metadata must fit the disk.
var floors = oci.Floors{MemoryBytes: 16 << 20, MemoryWhy: "too small for the agent", DiskBytes: 32 << 20, Pids: 16}

// Stop kills sandbox id and removes all of it (see oci.Runtime.StopWith).
// It is idempotent.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.Locks.Lock(id)()
	return b.StopWith(ctx, id, func(dir string) error { return unmountAll(dir, b.rootPath(id)) })
}
