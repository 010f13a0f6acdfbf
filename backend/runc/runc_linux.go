package runc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
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

// Backend runs sandboxes with runc. It is safe for concurrent use; calls for
// one id are serialized. What runc does as runsc does (state, list, stop,
// pause, stats, network) is oci.Runtime's.
type Backend struct {
	*oci.Runtime
	cfg       Config
	roots     string
	limitSwap bool
	// canShield says whether the agent can be shielded from the OOM
	// killer (see afterCreate).
	canShield bool
	// kernelTCP is the cgroup v1 memory hierarchy when it can limit
	// socket buffers (see socketBufferBytes), else empty.
	kernelTCP string
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
	b := &Backend{cfg: cfg, roots: roots, limitSwap: oci.SwapLimitable(), kernelTCP: kernelTCPLimitable(), canShield: hasCapSysResource()}
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

// rootPath is where sandbox id's root is mounted: under the run directory
// of this backend's Root, in a directory of the sandbox's own (see
// mountRoot).
func (b *Backend) rootPath(id string) string { return filepath.Join(b.roots, id, "root") }

// record is what the backend keeps about a running sandbox.
type record struct {
	backend.Sandbox
	Limits     limits            `json:"limits"`
	HostIDBase uint32            `json:"hostIDBase"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Start boots spec: claim the bundle, make the network (whose address
// block also picks the sandbox's host ids), mount the root, then runc
// create and start. A failure undoes the steps done.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (_ *backend.Sandbox, retErr error) {
	bt, err := b.BeginStart(ctx, spec, floors)
	if err != nil {
		return nil, err
	}
	defer bt.End(&retErr)
	id, dir, root := spec.ID, bt.Dir, b.rootPath(spec.ID)
	bt.Undo.Add(func() error { return unmountAll(dir, root) })
	ep, err := bt.Network(spec)
	if err != nil {
		return nil, err
	}
	hostBase, err := b.hostIDBase(ep.SandboxAddr)
	if err != nil {
		return nil, bt.Fail(err)
	}
	lim := resolveLimits(spec.Resources)
	if err := mountLower(spec.RootFS, dir, hostBase); err != nil {
		return nil, bt.Fail(err)
	}
	if err := makeDisk(ctx, spec.RootFS, dir, lim.DiskBytes, hostBase); err != nil {
		return nil, bt.Fail(err)
	}
	if err := mountRoot(dir, root, hostBase); err != nil {
		return nil, bt.Fail(err)
	}
	bt.Step("root")
	pid, err := bt.Run(buildSpec(specInput{
		Spec:        b.WithNetwork(spec, ep),
		RootPath:    root,
		Limits:      lim,
		NetNSPath:   ep.NetNSPath,
		CgroupsPath: b.CgroupsPath(id),
		HostIDBase:  hostBase,
		LimitSwap:   b.limitSwap,
	}), b.Cmd, func() error { return b.afterCreate(id, dir, lim) })
	if err != nil {
		return nil, err
	}
	return bt.Done(ep, pid, func(sb backend.Sandbox) any {
		return record{Sandbox: sb, Limits: lim, HostIDBase: hostBase, Labels: spec.Labels}
	})
}

// afterCreate sets, between runc create and start (the sandbox's init
// waits for start and has run nothing), what runc 1.1 does not set from
// the spec or cannot from inside the user namespace: the limit that makes
// cgroup v1 charge socket buffers (see socketBufferBytes), and the agent's
// shield from the kernel's OOM killer, which must never pick the agent
// (whose end is the sandbox's): lowering oom_score_adj takes the host's
// root. The agent gives the commands it starts the ordinary 0 again.
func (b *Backend) afterCreate(id, dir string, lim limits) error {
	if b.kernelTCP != "" {
		if err := os.WriteFile(filepath.Join(b.kernelTCP, b.CgroupsPath(id), "memory.kmem.tcp.limit_in_bytes"),
			[]byte(strconv.FormatInt(lim.socketBufferBytes(), 10)), 0); err != nil {
			return err
		}
	}
	pid, err := oci.ReadPid(filepath.Join(dir, oci.PidFile))
	if err != nil {
		return err
	}
	if !b.canShield {
		// A daemon without CAP_SYS_RESOURCE (itself in a container)
		// cannot lower it: the agent is then as likely a pick as any
		// (tupper doctor says so).
		return nil
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte("-1000"), 0)
}

// hasCapSysResource reports whether this process may lower a process's
// oom_score_adj: it holds CAP_SYS_RESOURCE.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
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

// Close stops the backend's egress services and removes its roots'
// directory if no sandbox is mounted there. Sandboxes keep running.
func (b *Backend) Close() error {
	err := b.Runtime.Close()
	if rerr := os.Remove(b.roots); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && !errors.Is(rerr, unix.ENOTEMPTY) && !errors.Is(rerr, unix.EEXIST) {
		err = errors.Join(err, rerr)
	}
	return err
}

// Stop kills sandbox id and removes all of it (see oci.Runtime.StopWith).
// It is idempotent.
func (b *Backend) Stop(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.Locks.Lock(id)()
	return b.StopWith(ctx, id, func(dir string) error { return unmountAll(dir, b.rootPath(id)) })
}

// kernelTCPLimitable returns the host's memory hierarchy when it is cgroup
// v1 with a limit of socket buffers, which must be set for them to be
// charged (v2 charges them always), and "" otherwise.
func kernelTCPLimitable() string {
	mounts, err := oci.CgroupMounts()
	if err != nil {
		return ""
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "memory.kmem.tcp.limit_in_bytes")); err == nil {
			return m
		}
	}
	return ""
}
