// Package apple is the Apple Containers backend: each sandbox is one
// container of Apple's `container` CLI (github.com/apple/container, 1.0 or
// later, on macOS 26 on Apple silicon), which runs every container in a
// lightweight VM of its own, with the agent as the container's first
// process. There is no Go library for it and its API server takes calls
// from its own user only, so the backend drives the CLI.
//
// A sandbox is the container named by its id, with the labels tupper.id
// (the id) and tupper.root (a digest of Config.Root, so that two Tupper
// roots on one Mac, or a test and the daemon, never claim each other's
// containers). The `container` system is the record of what runs: State,
// Stop and List ask it (`container list --all --format json`), so a
// sandbox outlives the process that started it, and leftovers of a crash
// are listed. Everything else the backend makes lives under Config.Root:
//
//	<Root>/agent/tupper-agent   the agent (static, linux, the guest's
//	                            architecture), bind-mounted read-only into
//	                            every container at /.tupper: a directory,
//	                            as single-file binds are unreliable
//	                            (apple/container#1251)
//	<Root>/tmp/                 an image's OCI archive while `container
//	                            image load` reads it; removed after
//
// Images: `container` has a store of its own. The backend writes the
// sandbox's image (Spec.Image's blobs, or when that is nil a one-layer
// image of Spec.RootFS) as a tar of an OCI image layout, loads it with
// `container image load`, and runs it by a name of its own,
// tupper.local/<name>:<digest>; a name already in `container image list`
// is not loaded again.
//
// The container's host name is its name, the sandbox id: `container run`
// sets no other, so Spec.Hostname is not used.
//
// Limits: CPUs and memory are the VM's (`-c`, `-m`; CPUs round up to whole
// cores). Pids is RLIMIT_NPROC of the agent (`--ulimit nproc=N:N`), which
// every process of the sandbox inherits; in a VM of its own that counts the
// sandbox's processes alone. Disk is not capped: `container` has no
// per-container disk limit, so Resources.DiskBytes is not enforced (Start
// logs it once). Egress policies cannot be enforced either: every
// container reaches what the Mac reaches through vmnet's NAT, so a Spec
// with an egress policy is refused.
//
// Importing the package registers it as "apple" (see register.go).
package apple

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/idlock"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
)

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.StatsReader = (*Backend)(nil)
	_ backend.Waiter      = (*Backend)(nil)
)

// Defaults for the zero fields of Config.
const (
	// DefaultCLI is the name of Apple's CLI, looked up on $PATH.
	DefaultCLI = "container"
	// DefaultArch is the architecture of the containers' VMs: Apple
	// silicon runs arm64 Linux.
	DefaultArch        = "arm64"
	DefaultCPUs        = 2
	DefaultMemoryBytes = 1 << 30
	DefaultPids        = 1024
	// DefaultStartTimeout bounds how long Start waits for a new
	// container's address and for its agent to take connections.
	DefaultStartTimeout = 30 * time.Second
)

// Labels every container of the backend carries.
const (
	LabelID   = "tupper.id"
	LabelRoot = "tupper.root"
)

// AgentPath is where the agent appears inside every container.
const AgentPath = backend.AgentMountDir + "/tupper-agent"

// defaultPath is the agent's PATH when Spec.Env sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// cleanupTimeout bounds the undo of a failed Start, which runs even when
// the Start's ctx is done.
const cleanupTimeout = 30 * time.Second

// containerName is what `container` accepts as a container's name (its
// ManagedContainer.nameValid): a DNS label of at most 63 characters.
var containerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// Config configures a Backend.
type Config struct {
	// Root is the directory the backend owns for its state. Required and
	// absolute, without commas (it goes into a --mount option).
	Root string
	// CLI is the `container` binary: a path, or a name looked up on
	// $PATH. Empty means DefaultCLI.
	CLI string
	// AgentPath, when set, is the agent binary every sandbox runs, in
	// place of Spec.Agent.Path: a static linux binary for Arch. The
	// agent Tupper finds beside itself is the host's; on macOS `make
	// dist` puts the linux/arm64 one there instead (scripts/dist.sh).
	AgentPath string
	// Arch is the architecture of the containers' VMs, "arm64" (the
	// default: Apple silicon) or "amd64"; the agent must be built for it.
	Arch string
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
	// DefaultCPUs, DefaultMemoryBytes and DefaultPids replace the zero
	// fields of a Spec's Resources. Zero means 2 CPUs, 1 GiB and 1024.
	DefaultCPUs        float64
	DefaultMemoryBytes int64
	DefaultPids        int64
	// StartTimeout bounds the wait for a new container's address and for
	// its agent's port; zero means DefaultStartTimeout.
	StartTimeout time.Duration
}

// Validate reports what is wrong with c, as an errdefs.ErrInvalidArgument.
func (c *Config) Validate() error {
	var errs []error
	switch {
	case c.Root == "":
		errs = append(errs, errors.New("Root is required"))
	case !filepath.IsAbs(c.Root):
		errs = append(errs, fmt.Errorf("Root %q must be absolute", c.Root))
	case strings.ContainsAny(c.Root, ",="):
		errs = append(errs, fmt.Errorf("Root %q must not hold a comma or an equals sign: the agent's directory under it goes into a --mount option", c.Root))
	}
	if c.Arch != "" && c.Arch != "arm64" && c.Arch != "amd64" {
		errs = append(errs, fmt.Errorf("Arch %q: want arm64 or amd64", c.Arch))
	}
	if c.AgentPath != "" && !filepath.IsAbs(c.AgentPath) {
		errs = append(errs, fmt.Errorf("AgentPath %q must be absolute", c.AgentPath))
	}
	if c.DefaultCPUs < 0 || c.DefaultMemoryBytes < 0 || c.DefaultPids < 0 || c.StartTimeout < 0 {
		errs = append(errs, errors.New("defaults and timeouts must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("apple config: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.CLI == "" {
		c.CLI = DefaultCLI
	}
	if c.Arch == "" {
		c.Arch = DefaultArch
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = DefaultCPUs
	}
	if c.DefaultMemoryBytes == 0 {
		c.DefaultMemoryBytes = DefaultMemoryBytes
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = DefaultPids
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c
}

// Backend runs sandboxes as containers of Apple's `container`. It is safe
// for concurrent use; the calls for one id are serialized.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	cli       *cli
	rootLabel string
	agents    *agentDir
	images    *imageLoader
	locks     idlock.Locks

	diskOnce sync.Once // the warning that disk is not capped
}

// New makes a Backend from cfg: it fills in defaults, finds the CLI and
// makes the directories under cfg.Root. It runs no `container` command. It
// fails with errdefs.ErrInvalidArgument for a bad cfg and
// errdefs.ErrNotFound when the CLI is missing.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	path, err := exec.LookPath(cfg.CLI)
	if err != nil {
		return nil, fmt.Errorf("apple: Apple's container CLI %q is not found (%v): install container 1.0 or later from https://github.com/apple/container/releases and run `container system start --enable-kernel-install`, or set the backend option container=PATH: %w",
			cfg.CLI, err, errdefs.ErrNotFound)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("apple: %w", err)
	}
	for _, d := range []string{cfg.Root, filepath.Join(cfg.Root, "agent"), filepath.Join(cfg.Root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("apple: %w", err)
		}
	}
	// Archives a crashed process left half-written.
	left, _ := filepath.Glob(filepath.Join(cfg.Root, "tmp", "*"))
	for _, p := range left {
		os.RemoveAll(p)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(cfg.Root)))
	c := &cli{path: path}
	b := &Backend{
		cfg:       cfg,
		log:       cfg.Logger.With("backend", "apple"),
		cli:       c,
		rootLabel: hex.EncodeToString(sum[:])[:16],
		agents:    &agentDir{dir: filepath.Join(cfg.Root, "agent"), arch: cfg.Arch},
		images:    &imageLoader{cli: c, tmp: filepath.Join(cfg.Root, "tmp"), arch: cfg.Arch, loaded: map[string]bool{}},
	}
	return b, nil
}

// Start boots sandbox spec.ID: it puts the agent in place, loads the image
// into `container`'s store when it is not there, runs the container, and
// waits for the container's address and for the agent to take
// connections there. A failed Start removes the container it made.
func (b *Backend) Start(ctx context.Context, spec *backend.Spec) (_ *backend.Sandbox, err error) {
	if err := b.checkSpec(spec); err != nil {
		return nil, err
	}
	id := spec.ID
	unlock := b.locks.Lock(id)
	defer unlock()
	log := b.log.With("sandbox", id)

	all, err := b.cli.containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: %w", id, err)
	}
	if i := slices.IndexFunc(all, func(r record) bool { return r.ID == id }); i >= 0 {
		if b.ours(all[i]) {
			return nil, fmt.Errorf("apple: sandbox %q: %w", id, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("apple: sandbox %q: a container of that name that Tupper did not make exists (`container delete %s` removes it): %w", id, id, errdefs.ErrAlreadyExists)
	}

	agentPath := spec.Agent.Path
	if b.cfg.AgentPath != "" {
		agentPath = b.cfg.AgentPath
	}
	agentDir, err := b.agents.ensure(agentPath)
	if err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: %w", id, err)
	}
	ref, err := b.images.ensure(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: %w", id, err)
	}
	if spec.Resources.DiskBytes > 0 {
		b.diskOnce.Do(func() {
			log.Warn("disk limits are not enforced: Apple's container has no per-container disk cap", "disk_bytes", spec.Resources.DiskBytes)
		})
	}

	var undo cleanup.Stack
	defer func() {
		if err == nil {
			return
		}
		if uerr := undo.Run(); uerr != nil {
			log.Error("cleanup after a failed start", "err", uerr)
			err = fmt.Errorf("%w (and removing what it made failed: %v)", err, uerr)
		}
	}()
	// A failed `container run` may still have made the container (it
	// creates, then boots): the undo looks and removes what is there.
	undo.Add(func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		return b.remove(cctx, id)
	})
	if _, err := b.cli.run(ctx, b.runArgs(spec, ref, agentDir)...); err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: %w", id, err)
	}
	started := time.Now()

	deadline := started.Add(b.cfg.StartTimeout)
	addr, err := b.waitAddress(ctx, id, deadline)
	if err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: %w", id, err)
	}
	agentAddr := net.JoinHostPort(addr.String(), strconv.Itoa(backend.AgentPort))
	if err := waitPort(ctx, agentAddr, deadline); err != nil {
		return nil, fmt.Errorf("apple: start sandbox %q: the container runs at %s, but its agent does not take connections at %s within %v (%v): the Mac reaches containers' addresses on macOS 26 and later only; `container logs %s` shows the agent's output: %w",
			id, addr, agentAddr, b.cfg.StartTimeout, err, id, errdefs.ErrUnavailable)
	}
	undo.Release()
	log.Debug("started", "addr", agentAddr, "image", ref)
	return &backend.Sandbox{ID: id, AgentAddr: agentAddr, StartedAt: started}, nil
}

// checkSpec refuses what the backend cannot do as asked.
func (b *Backend) checkSpec(spec *backend.Spec) error {
	switch {
	case spec == nil:
		return fmt.Errorf("apple: nil spec: %w", errdefs.ErrInvalidArgument)
	case len(spec.ID) > 63 || !containerName.MatchString(spec.ID):
		return fmt.Errorf("apple: sandbox id %q: a container's name is 2 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit: %w", spec.ID, errdefs.ErrInvalidArgument)
	case spec.RootFS == "" && spec.Image == nil:
		return fmt.Errorf("apple: sandbox %q: the spec names no image (RootFS and Image are empty): %w", spec.ID, errdefs.ErrInvalidArgument)
	case spec.Agent.Path == "" && b.cfg.AgentPath == "":
		return fmt.Errorf("apple: sandbox %q: no agent binary: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if p := spec.Network; p != nil && (len(p.AllowOut) > 0 || len(p.DenyOut) > 0 || len(p.Rules) > 0) {
		return fmt.Errorf("apple: sandbox %q: egress policies are not enforced on Apple's containers, which reach whatever the Mac reaches through vmnet's NAT: create the sandbox without a network policy, or run it on a Linux host (gvisor or runc backend): %w",
			spec.ID, errdefs.ErrNotSupported)
	}
	return nil
}

// runArgs is the `container run` command line for spec.
func (b *Backend) runArgs(spec *backend.Spec, ref, agentDir string) []string {
	cpus := spec.Resources.CPUs
	if cpus == 0 {
		cpus = b.cfg.DefaultCPUs
	}
	mem := spec.Resources.MemoryBytes
	if mem == 0 {
		mem = b.cfg.DefaultMemoryBytes
	}
	pids := spec.Resources.Pids
	if pids == 0 {
		pids = b.cfg.DefaultPids
	}
	args := []string{"run", "--detach", "--name", spec.ID,
		// A VM has whole cores; memory has 1 MiB granularity.
		"--cpus", strconv.Itoa(max(1, int(math.Ceil(cpus)))),
		"--memory", strconv.FormatInt((mem+(1<<20)-1)>>20, 10) + "M",
		"--ulimit", fmt.Sprintf("nproc=%d:%d", pids, pids),
		// The agent runs as root whatever user the image names: it
		// starts each command as the user asked for.
		"--user", "0:0",
	}
	env := spec.Env
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append(slices.Clip(env), defaultPath)
	}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	args = append(args,
		"--label", LabelID+"="+spec.ID,
		"--label", LabelRoot+"="+b.rootLabel,
		"--mount", "type=bind,source="+agentDir+",target="+backend.AgentMountDir+",readonly",
		"--entrypoint", AgentPath,
		ref)
	return append(args, spec.Agent.Args...)
}

// waitAddress polls `container inspect` until container id has an IPv4
// address, it stops, or deadline passes.
func (b *Backend) waitAddress(ctx context.Context, id string, deadline time.Time) (netip.Addr, error) {
	for {
		recs, err := b.cli.inspect(ctx, id)
		if err != nil {
			return netip.Addr{}, err
		}
		i := slices.IndexFunc(recs, func(r record) bool { return r.ID == id })
		switch {
		case i < 0:
			return netip.Addr{}, fmt.Errorf("`container inspect %s` does not show the container it just ran: %w", id, errdefs.ErrUnavailable)
		case recs[i].State == stateStopped:
			return netip.Addr{}, fmt.Errorf("the container stopped right after it started: its agent exited (`container logs %s` shows why): %w", id, errdefs.ErrUnavailable)
		case recs[i].Addr.IsValid():
			return recs[i].Addr, nil
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("the container has no IPv4 address %v after it started: see `container network list` and `container system logs`: %w",
				b.cfg.StartTimeout, errdefs.ErrUnavailable)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return netip.Addr{}, err
		}
	}
}

// waitPort dials addr until it takes a connection or deadline passes.
func waitPort(ctx context.Context, addr string, deadline time.Time) error {
	var last error
	for {
		attempt := time.Now().Add(time.Second)
		if deadline.Before(attempt) {
			attempt = deadline
		}
		dctx, cancel := context.WithDeadline(ctx, attempt)
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return last
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ours reports whether r is a container of this backend.
func (b *Backend) ours(r record) bool {
	return r.Labels[LabelRoot] == b.rootLabel && r.Labels[LabelID] == r.ID
}

// find returns this backend's container id.
func (b *Backend) find(ctx context.Context, id string) (record, bool, error) {
	all, err := b.cli.containers(ctx)
	if err != nil {
		return record{}, false, err
	}
	for _, r := range all {
		if r.ID == id && b.ours(r) {
			return r, true, nil
		}
	}
	return record{}, false, nil
}

// State reports sandbox id's state from `container list`. A container in a
// state the backend does not know is an error, not a guess.
func (b *Backend) State(ctx context.Context, id string) (backend.State, error) {
	r, ok, err := b.find(ctx, id)
	if err != nil {
		return "", fmt.Errorf("apple: state of sandbox %q: %w", id, err)
	}
	if !ok {
		return "", fmt.Errorf("apple: sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	switch r.State {
	case stateRunning, stateStopping:
		return backend.StateRunning, nil
	case stateStopped:
		return backend.StateStopped, nil
	}
	return "", fmt.Errorf("apple: sandbox %q: `container list` says its container is %q, which the backend cannot read as running or stopped: %w", id, r.State, errdefs.ErrUnavailable)
}

// Stop kills sandbox id's container and deletes it. A sandbox the backend
// holds nothing for is stopped already.
func (b *Backend) Stop(ctx context.Context, id string) error {
	unlock := b.locks.Lock(id)
	defer unlock()
	if err := b.remove(ctx, id); err != nil {
		return fmt.Errorf("apple: stop sandbox %q: %w", id, err)
	}
	return nil
}

// remove kills and deletes container id when it is this backend's. Whether
// it is gone is read from `container list` afterwards, not from the
// commands' errors: a container that ended or went in between is no error.
func (b *Backend) remove(ctx context.Context, id string) error {
	r, ok, err := b.find(ctx, id)
	if err != nil || !ok {
		return err
	}
	var errs []error
	if r.State != stateStopped {
		if _, err := b.cli.run(ctx, "kill", id); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := b.cli.run(ctx, "delete", "--force", id); err != nil {
		errs = append(errs, err)
	}
	if _, ok, err := b.find(ctx, id); err != nil {
		return errors.Join(append(errs, err)...)
	} else if ok {
		return fmt.Errorf("container %s is still there after `container kill` and `container delete --force`: %w", id, errors.Join(errs...))
	}
	return nil
}

// List returns the ids of this backend's containers, running or not.
func (b *Backend) List(ctx context.Context) ([]string, error) {
	all, err := b.cli.containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("apple: list sandboxes: %w", err)
	}
	var ids []string
	for _, r := range all {
		if b.ours(r) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// Wait blocks until sandbox id's container is no longer running (or is
// gone), polling `container list`.
func (b *Backend) Wait(ctx context.Context, id string) error {
	for {
		st, err := b.State(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			return nil
		case err == nil && st != backend.StateRunning:
			return nil
		case err != nil && ctx.Err() == nil:
			b.log.Debug("wait: state unknown for now", "sandbox", id, "err", err)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// Stats reads sandbox id's resource use with `container stats`.
func (b *Backend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	if _, ok, err := b.find(ctx, id); err != nil {
		return nil, fmt.Errorf("apple: stats of sandbox %q: %w", id, err)
	} else if !ok {
		return nil, fmt.Errorf("apple: sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	out, err := b.cli.run(ctx, "stats", "--no-stream", "--format", "json", id)
	if err != nil {
		return nil, fmt.Errorf("apple: stats of sandbox %q: %w", id, err)
	}
	st, err := parseStats(out, id)
	if err != nil {
		return nil, fmt.Errorf("apple: stats of sandbox %q: %w", id, err)
	}
	return st, nil
}
