package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	runc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/network"
)

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Pauser      = (*Backend)(nil)
	_ backend.StatsReader = (*Backend)(nil)
)

const (
	// runscTimeout bounds one runsc command that changes state.
	runscTimeout = oci.RuntimeTimeout
	// minDiskBytes is the smallest disk cap: the agent's first writes
	// (resolv.conf, hosts, the trust store, the user's home) must fit.
	minDiskBytes = 32 << 20
)

// Files in a sandbox's bundle directory.
const (
	rootfsDir  = "rootfs" // the host overlay of the image, runsc's root
	overlayDir = "ovl"    // upper and work dirs of that overlay
	upperDir   = "upper"  // runsc's overlay filestore goes here
)

// Backend runs sandboxes with runsc. It is safe for concurrent use; calls
// for one id are serialized.
type Backend struct {
	// What runsc does as runc does (state, list, stop, pause, stats,
	// network) is oci.Runtime's.
	*oci.Runtime
	cfg       Config
	limitSwap bool
	budget    *hostBudget
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
	budget, err := newHostBudget(cfg)
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
	b := &Backend{cfg: cfg, limitSwap: oci.SwapLimitable(), budget: budget, foreign: foreignRunsc{since: time.Now()}}
	b.Runtime = &oci.Runtime{
		Name: "runsc",
		Cmd: &runc.Runc{
			Command: cfg.RunscPath,
			Root:    stateDir,
			Debug:   cfg.Debug,
			// A signal to the daemon's process group must not hit runsc
			// halfway through a command.
			Setpgid:   true,
			ExtraArgs: flags,
		},
		Sandboxes:    sandboxes,
		CgroupParent: cfg.CgroupParent,
		Pool:         pool,
		Egress:       egress,
		Log:          cfg.Logger.With("backend", "gvisor"),
		Knows:        b.runscKnows,
		Leftovers:    b.removeRunscLeftovers,
	}
	return b, nil
}

// record is what the backend keeps about a running sandbox, in
// <bundle>/sandbox.json.
type record struct {
	backend.Sandbox
	Limits    limits            `json:"limits"`
	DiskBytes int64             `json:"diskBytes,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// RootFS is the image the sandbox runs on (Spec.RootFS), which a
	// checkpoint of it must be restored on.
	RootFS string `json:"rootfs,omitempty"`
}

// Start boots spec as described by backend.Backend. Its steps are: claim
// the bundle directory and mount the root overlay, reserve host tasks,
// make the network, write the OCI spec, runsc create, set the host's
// memory limit and runsc start; a failure undoes the steps done, in
// reverse (see oci.Boot).
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	return b.boot(ctx, spec, "")
}

// boot is Start, or with image set Restore: the same steps, with runsc's
// restore from the checkpoint in image in place of its create and start.
func (b *Backend) boot(ctx context.Context, spec *backend.Spec, image string) (_ *backend.Sandbox, retErr error) {
	bt, err := b.BeginStart(ctx, spec, floors)
	if err != nil {
		return nil, err
	}
	defer bt.End(&retErr)
	dir, cgPath := bt.Dir, b.CgroupsPath(spec.ID)
	if err := os.Mkdir(filepath.Join(dir, upperDir), 0o700); err != nil {
		return nil, bt.Fail(err)
	}
	bt.Undo.Add(func() error { return unmountRootFS(dir) })
	if err := mountHostSafe(dir); err != nil {
		return nil, bt.Fail(err)
	}
	rootfs, err := mountRootFS(spec.RootFS, dir)
	if err != nil {
		return nil, bt.Fail(err)
	}
	bt.Step("claim")

	// Admission: the host must have room for this sandbox beside what
	// the others use (see hostBudget). The reservation bridges the time
	// until runsc makes the cgroup, which then carries it.
	lim := resolveLimits(&b.cfg, spec.Resources)
	release, err := b.budget.reserve(cgPath, lim.hostPids(), lim.hostMemory())
	if err != nil {
		return nil, bt.Fail(err)
	}
	defer release()

	ep, err := bt.Network(spec)
	if err != nil {
		return nil, err
	}
	create := *b.Cmd
	create.ExtraArgs = append(slices.Clip(b.Cmd.ExtraArgs), overlayFlag(dir, b.diskBytes(spec.Resources)))
	ociSpec := buildSpec(specInput{
		Spec:        b.WithNetwork(spec, ep),
		RootPath:    rootfs,
		Limits:      lim,
		NetNSPath:   ep.NetNSPath,
		CgroupsPath: cgPath,
		LimitSwap:   b.limitSwap,
	})
	hostLimits := func() error {
		// runsc has shown the sandbox its memory limit; the host's sits a
		// headroom above (see hostMemory).
		if err := setHostMemory(cgPath, lim.hostMemory()); err != nil {
			return err
		}
		if err := b.budget.limitParent(); err != nil {
			bt.Log.Warn("cannot cap the host tasks and memory of all sandboxes together", "err", err)
		}
		return nil
	}
	var pid int
	if image == "" {
		pid, err = bt.Run(ociSpec, &create, hostLimits)
	} else {
		pid, err = bt.Restore(ociSpec, &create, image, hostLimits)
	}
	if err != nil {
		return nil, err
	}
	return bt.Done(ep, pid, func(sb backend.Sandbox) any {
		return record{Sandbox: sb, Limits: lim, DiskBytes: b.diskBytes(spec.Resources), Labels: spec.Labels, RootFS: spec.RootFS}
	})
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

// floors are the smallest limits a gVisor sandbox takes.
var floors = oci.Floors{MemoryBytes: 64 << 20, MemoryWhy: "too small for the sentry", DiskBytes: minDiskBytes}

// Stop kills sandbox id and removes all of it (see oci.Runtime.StopWith):
// runsc's container and state, the cgroup, the host overlay, the network
// and the bundle. It is idempotent.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.Locks.Lock(id)()
	// A runsc command of a daemon that died mid-Start (or mid-Stop) may
	// still run on id; cleaning up under it would leave what it makes.
	b.waitForeignRunsc(ctx, id)
	return b.StopWith(ctx, id, unmountRootFS)
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
		matches, err := filepath.Glob(filepath.Join(b.Cmd.Root, pattern))
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

// runscKnows reports whether runsc keeps state for sandbox id: its state
// file, "<container>_sandbox:<sandbox>.state" in runsc's root.
func (b *Backend) runscKnows(id string) (bool, error) {
	_, err := os.Stat(filepath.Join(b.Cmd.Root, id+"_sandbox:"+id+".state"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}
