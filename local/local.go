// Package local runs Tupper in-process: an image store, the default backend
// and an engine, wired together and exposed as an sdk.Transport, so that the
// Go SDK and the CLI can drive sandboxes without a daemon.
package local

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/proto"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/secret"
)

// DefaultRoot is where Tupper keeps its state unless told otherwise:
// /var/lib/tupper on Linux (the daemon runs as root), the user's own
// application directory on macOS and Windows, where the daemon runs as the
// user whose containers or distributions it drives.
var DefaultRoot = defaultRoot()

// Config configures a Runtime. The zero value is usable.
type Config struct {
	// Root is the state directory; empty means $TUPPER_ROOT, else DefaultRoot.
	Root string
	// ImageRoot is the image store's directory; empty means Root/images.
	ImageRoot string
	// Backend names the default backend, which runs the sandboxes whose
	// create names none; empty means DefaultBackend. A create may name
	// any other registered backend: the engine opens it on first use.
	Backend string
	// BackendOptions are passed to the default backend (see each
	// backend's doc). Options are backend-specific (a backend refuses
	// keys it does not know), so other backends get none.
	BackendOptions map[string]string
	// Network is the operator's side of sandbox networking (resolvers,
	// exemptions, egress off), passed to every backend.
	Network backend.NetworkConfig
	// AgentPath is the tupper-agent binary; empty means EnsureAgent().
	AgentPath string
	// Engine carries the engine's defaults (timeouts, limits); its Root,
	// Backend, BackendConfig, Images and AgentPath are filled in by Open.
	Engine engine.Config
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Runtime is an in-process Tupper. It implements sdk.Transport.
type Runtime struct {
	images  *image.Store
	engine  *engine.Engine
	backend backend.Backend
	secrets *secret.Store

	// client carries the data plane to every sandbox, dialed by the
	// engine.
	client *http.Client

	// root and log are Config's, for the template builder (tpl), made at
	// the first template call (see templates.go).
	root string
	log  *slog.Logger
	tpl  templates
}

var (
	_ sdk.Transport           = (*Runtime)(nil)
	_ sdk.NetworkTransport    = (*Runtime)(nil)
	_ sdk.CheckpointTransport = (*Runtime)(nil)
)

// Open builds a Runtime: it opens the image store (Root/images), the
// secret store (Root/secrets), the default backend under
// Root/backends/<name> and the engine under
// Root/engine, which re-attaches to sandboxes an earlier run left running,
// opening the other backends they run on under Root/backends/<name> too.
func Open(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Root == "" {
		cfg.Root = os.Getenv("TUPPER_ROOT")
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.Backend == "" {
		cfg.Backend = DefaultBackend
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AgentPath == "" {
		p, err := EnsureAgent(ctx, filepath.Join(cfg.Root, "bin"), cfg.Logger)
		if err != nil {
			return nil, err
		}
		cfg.AgentPath = p
	}
	if cfg.ImageRoot == "" {
		cfg.ImageRoot = filepath.Join(cfg.Root, "images")
	}
	images, err := image.Open(image.Config{Root: cfg.ImageRoot, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	values := &secretValues{}
	secrets, err := openSecrets(&cfg, values)
	if err != nil {
		images.Close()
		return nil, err
	}
	backendConfig := func(name string) backend.Config {
		c := backend.Config{Root: filepath.Join(cfg.Root, "backends", name), Logger: cfg.Logger, Network: cfg.Network}
		if name == cfg.Backend {
			c.Options = cfg.BackendOptions
		}
		return c
	}
	be, err := backend.Open(cfg.Backend, backendConfig(cfg.Backend))
	if err != nil {
		images.Close()
		secrets.Close()
		return nil, err
	}
	ecfg := cfg.Engine
	ecfg.Root = filepath.Join(cfg.Root, "engine")
	ecfg.Backend, ecfg.BackendName, ecfg.BackendConfig = be, cfg.Backend, backendConfig
	ecfg.Images, ecfg.AgentPath, ecfg.Logger = images, cfg.AgentPath, cfg.Logger
	ecfg.Secrets = secrets
	r := &Runtime{images: images, backend: be, secrets: secrets}
	r.root, r.log = cfg.Root, cfg.Logger
	eng, err := engine.New(ctx, ecfg)
	if err != nil {
		images.Close()
		secrets.Close()
		if c, ok := be.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	r.engine = eng
	// Volumes are loop mounts, which a host's reboot undoes: the
	// sandboxes resumed or started from snapshots need theirs.
	if err := eng.MountVolumes(ctx); err != nil {
		cfg.Logger.Error("mount volumes", "err", err)
	}
	values.engine.Store(eng)
	// One client for every sandbox: the engine dials, keys its kept-alive
	// connections by sandbox, and cuts them when the sandbox dies.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy, t.DialContext, t.MaxIdleConnsPerHost = nil, eng.DialContext, 16
	r.client = &http.Client{Transport: t}
	return r, nil
}

// Images returns the runtime's image store.
func (r *Runtime) Images() *image.Store { return r.images }

// Engine returns the runtime's engine.
func (r *Runtime) Engine() *engine.Engine { return r.engine }

// Close closes the runtime; running sandboxes keep running (see
// engine.Engine.Close).
func (r *Runtime) Close() error {
	// Builds run sandboxes of the engine: they stop first.
	tplErr := r.closeTemplates()
	err := errors.Join(tplErr, r.engine.Close(), r.images.Close(), r.secrets.Close())
	// A backend may hold services of its own (the gVisor backend's
	// resolver and egress proxy); its sandboxes keep running.
	if c, ok := r.backend.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}

// CreateSandbox implements sdk.Transport.
//
// A create the engine refuses as busy (its turns and queue full) is tried
// again after the wait the refusal names, as the SDK's HTTP transport does
// with a 429's Retry-After, up to busyRetries times.
func (r *Runtime) CreateSandbox(ctx context.Context, req sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	opts := engine.CreateOptions{
		Template: req.Template, Image: req.Image, Timeout: req.Timeout, Metadata: req.Metadata,
		Env: req.Env, CPUs: req.CPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		Network: req.Network, AllowInternetAccess: req.AllowInternetAccess, Backend: req.Backend,
		AutoPause: req.AutoPause, AutoPauseMemory: req.AutoPauseMemory, AutoResume: req.AutoResume,
		VolumeMounts: volumeMounts(req.VolumeMounts),
	}
	for attempt := 0; ; attempt++ {
		sb, err := r.engine.Create(ctx, opts)
		if err == nil {
			return info(sb), nil
		}
		after, busy := errdefs.RetryAfter(err)
		if !busy || attempt == busyRetries {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(min(after, busyRetryWait)):
		}
	}
}

// busyRetries is how often a create refused as busy is tried again, and
// busyRetryWait caps each wait: the SDK's HTTP transport's figures.
const (
	busyRetries   = 3
	busyRetryWait = 10 * time.Second
)

// UpdateNetwork implements sdk.NetworkTransport.
func (r *Runtime) UpdateNetwork(ctx context.Context, id string, policy *sdk.NetworkPolicy, internet *bool) error {
	_, err := r.engine.UpdateNetwork(ctx, id, policy, internet)
	return err
}

// NetworkDenials implements sdk.NetworkTransport.
func (r *Runtime) NetworkDenials(ctx context.Context, id string) ([]sdk.NetworkDenial, error) {
	return r.engine.NetworkDenials(ctx, id)
}

// ConnectSandbox implements sdk.Transport.
func (r *Runtime) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*sdk.SandboxInfo, error) {
	sb, err := r.engine.Connect(ctx, id, timeout)
	if err != nil {
		return nil, err
	}
	return info(sb), nil
}

// ListSandboxes implements sdk.Transport.
func (r *Runtime) ListSandboxes(ctx context.Context, q sdk.ListQuery) (*sdk.ListPage, error) {
	sbs, next, err := r.engine.List(ctx, engine.ListOptions{States: q.States, Metadata: q.Metadata, Limit: q.Limit, NextToken: q.NextToken})
	if err != nil {
		return nil, err
	}
	page := &sdk.ListPage{NextToken: next}
	for _, sb := range sbs {
		page.Sandboxes = append(page.Sandboxes, *info(sb))
	}
	return page, nil
}

// GetSandbox implements sdk.Transport.
func (r *Runtime) GetSandbox(ctx context.Context, id string) (*sdk.SandboxInfo, error) {
	sb, err := r.engine.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return info(sb), nil
}

// SetTimeout implements sdk.Transport.
func (r *Runtime) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	return r.engine.SetTimeout(ctx, id, timeout)
}

// KillSandbox implements sdk.Transport.
func (r *Runtime) KillSandbox(ctx context.Context, id string) error {
	return r.engine.Kill(ctx, id)
}

// PauseSandbox implements sdk.CheckpointTransport.
func (r *Runtime) PauseSandbox(ctx context.Context, id string, keepMemory bool) error {
	return r.engine.Pause(ctx, id, keepMemory)
}

// CreateSnapshot implements sdk.CheckpointTransport.
func (r *Runtime) CreateSnapshot(ctx context.Context, id, name string) (*sdk.SnapshotInfo, error) {
	sn, err := r.engine.CreateSnapshot(ctx, id, name)
	if err != nil {
		return nil, err
	}
	info := snapshotInfo(sn)
	return &info, nil
}

// ListSnapshots implements sdk.CheckpointTransport.
func (r *Runtime) ListSnapshots(ctx context.Context, q sdk.SnapshotQuery) (*sdk.SnapshotPage, error) {
	list, next, err := r.engine.ListSnapshots(ctx, q.SandboxID, q.Name, q.Limit, q.NextToken)
	if err != nil {
		return nil, err
	}
	page := &sdk.SnapshotPage{NextToken: next}
	for _, sn := range list {
		page.Snapshots = append(page.Snapshots, snapshotInfo(sn))
	}
	return page, nil
}

// DeleteSnapshot implements sdk.CheckpointTransport.
func (r *Runtime) DeleteSnapshot(ctx context.Context, ref string) error {
	return r.engine.DeleteSnapshot(ctx, ref)
}

// ForkSandbox implements sdk.CheckpointTransport.
func (r *Runtime) ForkSandbox(ctx context.Context, id string, count int, timeout time.Duration) ([]sdk.ForkedSandbox, error) {
	results, err := r.engine.Fork(ctx, id, count, timeout)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.ForkedSandbox, len(results))
	for i, res := range results {
		if res.Err != nil {
			out[i].Err = res.Err
			continue
		}
		out[i].Info = info(res.Sandbox)
	}
	return out, nil
}

// DataPlane implements sdk.Transport: in-process, the SDK talks straight to
// the agent over the sandbox's veth.
func (r *Runtime) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	sb, err := r.engine.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &sdk.DataPlane{BaseURL: "http://" + engine.SandboxAddr(id, backend.AgentPort), AccessToken: sb.AccessToken, Client: r.client}, nil
}

func info(sb *engine.Sandbox) *sdk.SandboxInfo {
	return &sdk.SandboxInfo{
		SandboxID: sb.ID, TemplateID: sb.TemplateID, Metadata: sb.Metadata, State: sb.State,
		StartedAt: sb.StartedAt, EndAt: sb.EndAt, CPUCount: max(1, int(sb.CPUs+0.5)), MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB,
		EnvdVersion: proto.EnvdVersion, EnvdAccessToken: sb.AccessToken,
		Network: sb.Network.Redact(), AllowInternetAccess: sb.AllowInternetAccess, Backend: sb.Backend,
	}
}

func snapshotInfo(sn *engine.Snapshot) sdk.SnapshotInfo {
	return sdk.SnapshotInfo{SnapshotID: sn.ID, Names: sn.Names, SandboxID: sn.Source.ID, CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes}
}
