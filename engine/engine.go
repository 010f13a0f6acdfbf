// Package engine owns the lives of sandboxes: it creates them through a
// backend, records them in the store, kills them when their time is up, and
// after a restart re-attaches to the ones still running and cleans up the
// rest.
//
// A sandbox's life belongs to the Engine, never to the context of the call
// that created it: contexts passed to Engine methods bound only that call.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/secret"
)

// Sandbox is a sandbox's record as the engine keeps it.
type Sandbox = store.Sandbox

// Images resolves template and image names to unpacked images.
// *image.Store implements it.
type Images interface {
	Resolve(ctx context.Context, name string) (*image.Image, error)
}

// ImageLeaser is an Images that keeps an image's data while a sandbox
// runs on it: the engine leases each sandbox's image at create and
// releases it once the sandbox is gone. Without it, removing an image
// that sandboxes run on may delete their root filesystem under them.
// *image.Store implements it.
type ImageLeaser interface {
	Lease(ctx context.Context, holder, id string) error
	Release(ctx context.Context, holder string) error
	// Holders returns the holders of leases; id empty means of any image.
	Holders(ctx context.Context, id string) ([]string, error)
}

// Config configures an Engine.
type Config struct {
	// Root is the engine's state directory: the database and lock live here.
	Root string
	// Backend boots the sandboxes whose create names no backend;
	// BackendName is its name in the registry, which their records keep
	// (for example "gvisor"). The caller opened it and closes it after
	// the engine.
	Backend     backend.Backend
	BackendName string
	// BackendConfig, when set, lets sandboxes run on the other registered
	// backends: the engine opens the one a create names (or a record
	// names, at start) on first use, with backend.Open(name,
	// BackendConfig(name)), after its self-check says it works on this
	// host, and closes it at Close. Each backend must get a Root of its
	// own. Nil means the default backend alone.
	BackendConfig func(name string) backend.Config
	// Images resolves templates and images.
	Images Images
	// AgentPath is the host path of the static tupper-agent binary.
	AgentPath string

	// DefaultTemplate is used when a create names neither template nor
	// image; empty means "base".
	DefaultTemplate string
	// DefaultTimeout is a sandbox's time to live when a create names none;
	// zero means 5 minutes, as in E2B.
	DefaultTimeout time.Duration
	// MaxTimeout caps any time to live; zero means 24 hours.
	MaxTimeout time.Duration
	// DefaultCPUs, DefaultMemoryMB and DefaultPids are the limits when a
	// create names none; zeros mean 1 CPU, 1024 MB and 1024 pids (tasks,
	// threads included: each may cost the host five, and a host spares
	// only so many; see docs/design/limits.md).
	DefaultCPUs     float64
	DefaultMemoryMB int
	DefaultPids     int64
	// DefaultDiskMB is the disk cap (root and /tmp together) of a sandbox
	// whose create names none; MaxDiskMB is the largest a create may ask
	// for. Zeros mean DefaultDiskMB (or MaxDiskMB, when that is smaller)
	// and DefaultMaxDiskMB (or the default, when that is larger).
	DefaultDiskMB int
	MaxDiskMB     int
	// MaxMemoryMB and MaxCPUs are the most a create may ask for; zeros
	// mean the host's memory and CPUs (hostmax.go).
	MaxMemoryMB int
	MaxCPUs     float64
	// DefaultNetwork is the egress policy of sandboxes whose create says
	// nothing of it; nil allows all egress, as in E2B.
	DefaultNetwork *netpolicy.Policy
	// Secrets keeps the teams' secrets, which network rules name
	// (secrets.go). The caller opened it and closes it after the engine.
	// Nil means none: the secret calls fail with errdefs.ErrNotSupported,
	// and so does a rule that names a secret.
	Secrets *secret.Store
	// BootTimeout bounds how long a create waits for the agent to
	// answer; zero means 30 seconds.
	BootTimeout time.Duration
	// StopRetry is how long after a failed stop the engine tries again;
	// zero means 30 seconds.
	StopRetry time.Duration

	// Admission control (admission.go). MaxCreating bounds the creates
	// booting at once; zero means two per CPU. MaxQueued bounds the
	// creates waiting for a turn, and QueueWait how long one waits;
	// zeros mean 4 × MaxCreating and 20 seconds. MaxSandboxes caps the
	// live sandboxes; zero means DefaultMaxSandboxes(). A create beyond
	// these fails at once with an errdefs.Busy error.
	MaxCreating  int
	MaxQueued    int
	QueueWait    time.Duration
	MaxSandboxes int
	// MaxSandboxesPerTeam caps the live sandboxes of one team (see
	// Scope); zero means MaxSandboxes.
	MaxSandboxesPerTeam int
	// MaxSnapshotsPerTeam caps the snapshots one team keeps, each about
	// its sandbox's memory on disk; zero means 100.
	MaxSnapshotsPerTeam int

	// WarmPools are the templates of which sandboxes are kept booted
	// ahead of demand (pool.go); WarmMemoryMB bounds the memory limits of
	// all their waiting sandboxes together (zero: a quarter of the
	// host's memory).
	WarmPools    []PoolConfig
	WarmMemoryMB int

	// OnKilled, when set, is called with a sandbox's id once it has been
	// killed, whatever the reason (a request, its timeout, a crash). Data
	// planes use it to end the requests still open to that sandbox, whose
	// network vanished without closing their connections. It must not
	// block.
	OnKilled func(id string)

	// Logger receives the engine's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Root == "":
		return fmt.Errorf("engine: Root is required: %w", errdefs.ErrInvalidArgument)
	case c.Backend == nil:
		return fmt.Errorf("engine: Backend is required: %w", errdefs.ErrInvalidArgument)
	case c.Images == nil:
		return fmt.Errorf("engine: Images is required: %w", errdefs.ErrInvalidArgument)
	case c.AgentPath == "":
		return fmt.Errorf("engine: AgentPath is required: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := os.Stat(c.AgentPath); err != nil {
		return fmt.Errorf("engine: agent binary: %w (build it with `make build` or set TUPPER_AGENT)", err)
	}
	if c.BackendName == "" {
		c.BackendName = "unknown"
	}
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = "base"
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 5 * time.Minute
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 24 * time.Hour
	}
	if c.DefaultCPUs < 0 || c.DefaultMemoryMB < 0 || c.DefaultPids < 0 {
		return fmt.Errorf("engine: DefaultCPUs, DefaultMemoryMB and DefaultPids must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = 1
	}
	if c.DefaultMemoryMB == 0 {
		c.DefaultMemoryMB = 1024
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = 1024
	}
	if err := c.validateDisk(); err != nil {
		return err
	}
	if err := c.validateHostMax(); err != nil {
		return err
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 30 * time.Second
	}
	if c.StopRetry == 0 {
		c.StopRetry = 30 * time.Second
	}
	if c.MaxSnapshotsPerTeam == 0 {
		c.MaxSnapshotsPerTeam = 100
	}
	if c.WarmMemoryMB == 0 {
		if kb, ok := memTotalKB(); ok {
			c.WarmMemoryMB = int(kb >> 10 / 4)
		} else {
			c.WarmMemoryMB = 4 * c.DefaultMemoryMB
		}
	}
	if err := c.validateAdmission(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.DefaultNetwork = c.DefaultNetwork.Clone()
	if err := c.DefaultNetwork.Normalize(); err != nil {
		return fmt.Errorf("engine: DefaultNetwork: %w", err)
	}
	return nil
}

// Engine manages sandboxes. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store
	lock  *os.File

	mu sync.Mutex
	// live holds the sandboxes the engine runs; an id leaves it exactly
	// once, under mu, which makes kills and expiries race-free.
	live   map[string]*liveSandbox
	closed bool
	// leasePrefix starts this engine's image lease holders.
	leasePrefix string
	// admission hands out turns to create (admission.go).
	admission *admission
	// backends are the backends other than the default that the engine
	// opened, by name (backends.go); bclosed is set by Close. Guarded by
	// bmu, which is never held while a backend opens.
	bmu      sync.Mutex
	backends map[string]*openedBackend
	bclosed  bool
	// pools are the warm pools (pool.go); nil when none is configured
	// (or before New starts them).
	pools *warmPools
	// bg bounds the work the engine starts on its own (timeouts); Close
	// cancels it and waits.
	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type liveSandbox struct {
	// be is the backend the sandbox runs on and beName its name, the
	// record's Backend; neither changes.
	be     backend.Backend
	beName string
	// rec is the sandbox's record as last written to the store, which
	// readers get copies of: the data plane looks sandboxes up on every
	// request, and must not read the database to do it. Guarded by
	// Engine.mu; replaced, never changed in place.
	rec *Sandbox
	// endAt is when the sandbox's time runs out; guarded by Engine.mu.
	endAt time.Time
	timer *time.Timer
	// conns are the connections dialed into the sandbox, cut when it
	// leaves live; replaced (under Engine.mu) if it comes back.
	conns *connSet
	// writeMu orders the writes of the sandbox's record to the store,
	// which are made outside Engine.mu: no disk I/O under the global lock.
	writeMu sync.Mutex
	// op orders the operations that checkpoint or restore the sandbox
	// (pause, resume, snapshot, fork); a kill does not wait for it.
	op sync.Mutex
	// gen counts the sandbox's boots (a resume is one), and suspending is
	// set while a pause stops it: a watch of an earlier boot, or of one a
	// pause ends, must not take its end for a crash. Guarded by
	// Engine.mu.
	gen        uint64
	suspending bool
}

// New opens the engine's state under cfg.Root, re-attaches to the
// sandboxes that still run, and cleans up what crashed or leaked.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("engine root %s: %w", cfg.Root, err)
	}
	lock, err := lockRoot(cfg.Root)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(cfg.Root, "tupper.db"))
	if err != nil {
		lock.Close()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg: cfg, log: cfg.Logger, store: st, lock: lock,
		live: map[string]*liveSandbox{}, backends: map[string]*openedBackend{},
		bg: bg, cancel: cancel, admission: newAdmission(&cfg),
	}
	e.leasePrefix = leasePrefix(cfg.Root)
	if err := e.recover(ctx); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.startPools(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// leasePrefix starts the image lease holders of the engine at root: the
// image store may be shared by several engines, and each releases only
// its own leases.
func leasePrefix(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return "e" + hex.EncodeToString(sum[:4]) + "-"
}

// leaseImage pins sb's image for as long as sb lives.
func (e *Engine) leaseImage(ctx context.Context, sb *Sandbox) error {
	if l, ok := e.cfg.Images.(ImageLeaser); ok {
		if err := l.Lease(ctx, e.leasePrefix+sb.ID, sb.ImageID); err != nil {
			return fmt.Errorf("lease image %s: %w", sb.ImageRef, err)
		}
	}
	return nil
}

// releaseImage unpins the image of sandbox id.
func (e *Engine) releaseImage(ctx context.Context, id string) {
	if l, ok := e.cfg.Images.(ImageLeaser); ok {
		if err := l.Release(ctx, e.leasePrefix+id); err != nil {
			e.log.Warn("release image lease", "sandbox", id, "err", err)
		}
	}
}

// errRootInUse: another engine holds root's lock (lockRoot).
func errRootInUse(root string) error {
	return fmt.Errorf("engine root %s is in use by another tupper process (stop it, or use another state directory): %w", root, errdefs.ErrUnavailable)
}

// Close stops the engine's timers, kills the sandboxes waiting in its
// warm pools, closes the backends it opened (not Config.Backend) and
// closes its state. Other sandboxes keep running: a new Engine on the
// same Root re-attaches to them. Use KillAll first to stop them.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	for _, l := range e.live {
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	e.mu.Unlock()
	e.cancel()
	// Warm sandboxes are nobody's: they go with the engine rather than
	// hold memory while it is down (the next start would kill them).
	e.drainPools()
	e.wg.Wait()
	err := errors.Join(e.closeBackends(), e.store.Close())
	e.lock.Close()
	return err
}

// KillAll kills every sandbox the engine runs.
func (e *Engine) KillAll(ctx context.Context) error {
	e.mu.Lock()
	ids := make([]string, 0, len(e.live))
	for id := range e.live {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := e.Kill(ctx, id); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
