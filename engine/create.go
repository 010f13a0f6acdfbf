package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
)

// CreateOptions describe a sandbox to create.
type CreateOptions struct {
	// Template names a template; empty means the configured default. A
	// template is an image name in the image store.
	Template string
	// Image names an image directly instead of a template.
	Image string
	// Timeout is the time to live; zero means the default.
	Timeout time.Duration
	// Metadata are key/values to find the sandbox by.
	Metadata map[string]string
	// Env is the environment of every process in the sandbox.
	Env map[string]string
	// CPUs, MemoryMB and Pids are limits; zero means the default.
	CPUs     float64
	MemoryMB int
	Pids     int64
	// DiskMB caps what the sandbox writes to its file system (root and
	// /tmp together); zero means the default, and more than the engine's
	// MaxDiskMB is refused.
	DiskMB int
	// Network is the egress policy and AllowInternetAccess E2B's older
	// switch (false denies all egress on top of Network). When both are
	// nil the engine's DefaultNetwork applies.
	Network             *netpolicy.Policy
	AllowInternetAccess *bool
	// Secure, AutoPause, AutoPauseMemory and AutoResume are E2B's create
	// options of those names, kept in the record (see store.Sandbox).
	// AutoResume needs AutoPause, and AutoPauseMemory false (a pause of
	// files alone) rules AutoResume out, as in E2B.
	Secure          *bool
	AutoPause       bool
	AutoPauseMemory *bool
	AutoResume      bool
	// Backend names the registered backend to run the sandbox on; empty
	// means the engine's default (Config.Backend). An unknown name fails
	// with errdefs.ErrInvalidArgument, listing the known ones; a backend
	// that does not work on this host, with errdefs.ErrUnavailable.
	Backend string
	// VolumeMounts are volumes of the caller's team (by name, or id) to
	// mount read-write, each at its Path (see volumes.go).
	VolumeMounts []VolumeMount
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnvPrefix starts the names of the variables through which the
// engine talks to the agent (the access token); neither a create nor an
// image may set them.
const reservedEnvPrefix = "TUPPER_"

// Upper bounds of a create's limits: far above this machine, low enough
// that no arithmetic on them overflows.
const (
	maxMemoryMB = 1 << 20 // 1 TiB
	maxCPUs     = 1024
	maxPids     = 1 << 22
)

func (o *CreateOptions) validate(cfg *Config) error {
	if o.Template != "" && o.Image != "" {
		return fmt.Errorf("create: name a template or an image, not both: %w", errdefs.ErrInvalidArgument)
	}
	if o.AutoResume && !o.AutoPause {
		return fmt.Errorf("create: autoResume needs the sandbox to pause at its timeout (autoPause): %w", errdefs.ErrInvalidArgument)
	}
	if o.AutoResume && o.AutoPauseMemory != nil && !*o.AutoPauseMemory {
		return fmt.Errorf("create: autoResume needs a pause that keeps memory: a pause of files alone is resumed by connect only: %w", errdefs.ErrInvalidArgument)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("create: timeout %v is negative: %w", o.Timeout, errdefs.ErrInvalidArgument)
	}
	if o.Timeout > cfg.MaxTimeout {
		return fmt.Errorf("create: timeout %v is above the maximum %v: %w", o.Timeout, cfg.MaxTimeout, errdefs.ErrInvalidArgument)
	}
	if o.CPUs < 0 || o.MemoryMB < 0 || o.Pids < 0 {
		return fmt.Errorf("create: limits must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if o.MemoryMB != 0 && o.MemoryMB < 64 {
		return fmt.Errorf("create: memory %d MB is below the 64 MB a sandbox needs: %w", o.MemoryMB, errdefs.ErrInvalidArgument)
	}
	if o.MemoryMB > maxMemoryMB || o.CPUs > maxCPUs || o.Pids > maxPids {
		return fmt.Errorf("create: limits above %d MB, %d CPUs or %d pids: %w", maxMemoryMB, maxCPUs, maxPids, errdefs.ErrInvalidArgument)
	}
	if err := o.validateDisk(cfg); err != nil {
		return err
	}
	if err := o.validateHostMax(cfg); err != nil {
		return err
	}
	if err := checkMetadataSize(o.Metadata); err != nil {
		return err
	}
	if err := checkReservedMetadata("create", o.Metadata); err != nil {
		return err
	}
	if err := o.Network.Normalize(); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	total := 0
	for k, v := range o.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("create: environment variable name %q is not valid: %w", k, errdefs.ErrInvalidArgument)
		}
		// Linux takes no argument or variable of 128 KiB or more to
		// exec: the agent would not start, which a retry cannot mend.
		if n := len(k) + 1 + len(v); n >= maxEnvEntry {
			return fmt.Errorf("create: environment variable %q is %d bytes, at most %d: %w", k, n, maxEnvEntry-1, errdefs.ErrInvalidArgument)
		}
		total += len(k) + 1 + len(v)
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("create: environment variable %q holds a NUL byte: %w", k, errdefs.ErrInvalidArgument)
		}
		if strings.HasPrefix(k, reservedEnvPrefix) {
			return fmt.Errorf("create: environment variable %q: names starting with %s are Tupper's own: %w", k, reservedEnvPrefix, errdefs.ErrInvalidArgument)
		}
	}
	if total > maxEnvTotal {
		return fmt.Errorf("create: the environment variables are %d bytes together, at most %d: %w", total, maxEnvTotal, errdefs.ErrInvalidArgument)
	}
	return nil
}

// maxEnvEntry bounds one KEY=VALUE (Linux's MAX_ARG_STRLEN, 128 KiB, less
// its NUL), and maxEnvTotal all of them, well under the 2 MiB that exec
// takes for arguments and environment together.
const (
	maxEnvEntry = 128 << 10
	maxEnvTotal = 1 << 20
)

// Create boots a sandbox and returns once its agent answers, so that the
// caller can use it at once. A failed create leaves nothing behind.
func (e *Engine) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	opts.Network = opts.Network.Clone()
	if err := opts.validate(&e.cfg); err != nil {
		return nil, err
	}
	if err := e.bindSecrets(ctx, teamOf(ctx), opts.Network); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if opts.Template != "" {
		// A template may name a snapshot (E2B's Sandbox.create(snapshotId)).
		if sn, err := e.GetSnapshot(ctx, opts.Template); err == nil {
			if len(opts.VolumeMounts) > 0 {
				return nil, fmt.Errorf("create: a sandbox started from a snapshot mounts the snapshot's volumes, no others: %w", errdefs.ErrInvalidArgument)
			}
			return e.createFromSnapshot(ctx, opts, sn)
		} else if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("create: %w", err)
		}
	}
	if sb, ok := e.takeWarm(ctx, opts); ok {
		return sb, nil
	}
	// Before a turn is taken: a create that names a backend this host
	// lacks fails at once.
	be, err := e.backendNamed(ctx, opts.Backend)
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	backendName := cmp.Or(opts.Backend, e.cfg.BackendName)
	done, err := e.admit(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if opts.Network == nil && opts.AllowInternetAccess == nil {
		opts.Network = e.cfg.DefaultNetwork.Clone()
	}
	ref, template := opts.Image, opts.Template
	if ref == "" {
		if template == "" {
			template = e.cfg.DefaultTemplate
		}
		ref = template
	}
	img, err := e.cfg.Images.Resolve(ctx, ref)
	if alias, ok := image.TemplateAliases[ref]; ok && opts.Image == "" && errdefs.IsNotFound(err) {
		img, err = e.cfg.Images.Resolve(ctx, alias)
	}
	if err == nil {
		err = checkImageTeam(ctx, ref, img)
	}
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = e.cfg.DefaultTimeout
	}
	mounts, err := e.resolveMounts(ctx, scopeTeam(ctx), opts.VolumeMounts)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	sb := &Sandbox{
		ID: newID(), Backend: backendName, TemplateID: template, ImageRef: ref, ImageID: img.ID,
		State: store.StateCreating, Metadata: opts.Metadata, Env: opts.Env,
		CPUs: orDefault(opts.CPUs, e.templateCPUs(img)), MemoryMB: orDefault(opts.MemoryMB, e.templateMemoryMB(img)),
		DiskMB: orDefault(opts.DiskMB, e.cfg.DefaultDiskMB), AccessToken: newToken(),
		StartedAt: now, EndAt: now.Add(timeout),
		Network: opts.Network, AllowInternetAccess: opts.AllowInternetAccess,
		Secure: opts.Secure, AutoPause: opts.AutoPause, AutoPauseMemory: opts.AutoPauseMemory, AutoResume: opts.AutoResume,
		Timeout: timeout, Pids: orDefault(opts.Pids, e.cfg.DefaultPids),
		CodeInterpreterPort: codeInterpreterPort(img), VolumeMounts: mounts,
	}
	if err := setStartCommand(sb, img); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if sb.TemplateID == "" {
		sb.TemplateID = ref
	}
	owners(ctx, sb)
	log := e.log.With("sandbox", sb.ID, "op", "create", "backend", backendName)

	// The record goes in first: if the engine crashes mid-create, the
	// next start finds a "creating" record and cleans its leftovers.
	if err := e.checkHostDisk(); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if err := e.store.Put(ctx, sb); err != nil {
		return nil, fmt.Errorf("create: %w", e.explainDiskFull(err))
	}
	if err := e.holdVolumes(ctx, sb); err != nil {
		e.store.Delete(context.WithoutCancel(ctx), sb.ID)
		return nil, err
	}
	if err := e.leaseImage(ctx, sb); err != nil {
		e.store.Delete(context.WithoutCancel(ctx), sb.ID)
		return nil, fmt.Errorf("create: %w", err)
	}
	spec := e.specFor(sb, img)
	// Booting is the engine's business, not the caller's: a caller that
	// goes away mid-boot must not leave a half-made sandbox, so the boot
	// runs on the engine's context, bounded by BootTimeout.
	bootCtx, cancel := context.WithTimeout(e.bg, e.cfg.BootTimeout)
	defer cancel()
	started, err := be.Start(bootCtx, spec)
	if err == nil {
		sb.AgentAddr, sb.Pid = started.AgentAddr, started.Pid
		err = e.waitAgent(bootCtx, be, sb)
	}
	if err == nil {
		// A fresh bound: a boot that used most of BootTimeout must not
		// lose a healthy sandbox to the record's write.
		putCtx, cancel := context.WithTimeout(e.bg, 10*time.Second)
		sb.State = store.StateRunning
		err = e.store.Put(putCtx, sb)
		cancel()
	}
	if err != nil {
		log.Error("create failed", "err", err)
		e.abandon(be, sb.ID)
		return nil, fmt.Errorf("create sandbox from %q on %s: %w", ref, backendName, e.explainDiskFull(err))
	}
	if !e.track(sb, be) {
		// The engine closed while we booted: leave the sandbox running,
		// as Close promises; the next engine re-attaches to it.
		return nil, fmt.Errorf("create: engine is closed: %w", errdefs.ErrUnavailable)
	}
	if ctx.Err() != nil {
		// The caller went away while the sandbox booted: nobody knows
		// its id, and it would run its whole timeout for nothing.
		if err := e.kill(e.bg, sb.ID, "its creator went away before it was ready"); err != nil && !errdefs.IsNotFound(err) {
			log.Error("kill abandoned sandbox", "err", err)
		}
		return nil, fmt.Errorf("create: the caller went away: %w", context.Cause(ctx))
	}
	log.Info("sandbox created", "template", sb.TemplateID, "addr", sb.AgentAddr, "took", time.Since(now))
	return sb, nil
}

// specFor is what the backend boots sandbox sb, with image img, from.
func (e *Engine) specFor(sb *Sandbox, img *image.Image) *backend.Spec {
	return &backend.Spec{
		ID:        sb.ID,
		RootFS:    img.RootFS,
		Image:     BackendImage(img),
		Env:       sandboxEnv(img.Config.Env, sb.Env, sb.AccessToken),
		Agent:     backend.Agent{Path: e.cfg.AgentPath, Args: append(agentArgs(sb), imageAgentArgs(img)...)},
		Resources: backend.Resources{CPUs: sb.CPUs, MemoryBytes: int64(sb.MemoryMB) << 20, Pids: orDefault(sb.Pids, e.cfg.DefaultPids), DiskBytes: int64(sb.DiskMB) << 20},
		Labels:    map[string]string{"template": sb.TemplateID},
		Network:   netpolicy.WithInternet(sb.Network, sb.AllowInternetAccess),
		Mounts:    e.volumeMounts(sb),
	}
}

// waitAgent polls the agent's /health until it answers 204, failing early
// when be, sb's backend, says the sandbox is gone, or when the agent says
// that its template's start command failed (500 with a message).
func (e *Engine) waitAgent(ctx context.Context, be backend.Backend, sb *Sandbox) error {
	// Not through Dial: the sandbox is not live yet. No keep-alives:
	// each try is a fresh connection.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialBackend(ctx, be, sb.ID, sb.AgentAddr, backend.AgentPort)
		},
	}}
	defer client.CloseIdleConnections()
	url := "http://" + SandboxAddr(sb.ID, backend.AgentPort) + "/health"
	delay := 2 * time.Millisecond
	notReady := "" // what the agent last said it waits for
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			msg := ""
			if resp.StatusCode != http.StatusNoContent {
				msg = healthMessage(resp)
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusNoContent:
				return nil
			case resp.StatusCode == http.StatusInternalServerError && msg != "":
				return fmt.Errorf("sandbox %q: its template's start command failed: %s: %w", sb.ID, msg, errdefs.ErrFailedPrecondition)
			case resp.StatusCode == http.StatusServiceUnavailable && msg != "":
				notReady = msg
			}
		}
		if attempt%10 == 9 {
			// A look that failed because the boot's time ran out says
			// nothing of the sandbox: the deadline's error below does.
			if st, serr := be.State(ctx, sb.ID); (serr != nil || st != backend.StateRunning) && ctx.Err() == nil {
				return fmt.Errorf("sandbox %q stopped while booting (state %q, %v): %w", sb.ID, st, serr, errdefs.ErrUnavailable)
			}
		}
		select {
		case <-ctx.Done():
			if notReady != "" {
				return fmt.Errorf("sandbox %q: not ready within the boot timeout (%v): %s: %w", sb.ID, e.cfg.BootTimeout, notReady, errdefs.ErrDeadlineExceeded)
			}
			return fmt.Errorf("sandbox %q: agent at %s did not answer in time (last error: %v): %w", sb.ID, sb.AgentAddr, err, errdefs.ErrDeadlineExceeded)
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// sandboxEnv builds the agent's environment: the image's, then the
// create's, then the access token, which the agent reads and removes
// before starting any process.
func sandboxEnv(imageEnv []string, env map[string]string, token string) []string {
	// The agent reads the first TUPPER_ACCESS_TOKEN it finds: an image
	// must not get to set it (an empty one would switch the check off).
	out := slices.DeleteFunc(slices.Clone(imageEnv), func(kv string) bool { return strings.HasPrefix(kv, reservedEnvPrefix) })
	if !slices.ContainsFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return append(out, "TUPPER_ACCESS_TOKEN="+token)
}

// templateCPUs is the CPUs of a sandbox of img whose create names none:
// what its template asks for (image.LabelCPUs), within the engine's
// maximum, else the engine's default.
func (e *Engine) templateCPUs(img *image.Image) float64 {
	v, err := strconv.ParseFloat(img.Config.Labels[image.LabelCPUs], 64)
	if err != nil || v <= 0 || v > maxCPUs {
		return e.cfg.DefaultCPUs
	}
	return min(v, e.cfg.MaxCPUs)
}

// templateMemoryMB is templateCPUs for memory (image.LabelMemoryMB).
func (e *Engine) templateMemoryMB(img *image.Image) int {
	v, err := strconv.Atoi(img.Config.Labels[image.LabelMemoryMB])
	if err != nil || v < 64 || v > maxMemoryMB {
		return e.cfg.DefaultMemoryMB
	}
	return min(v, e.cfg.MaxMemoryMB)
}

// codeInterpreterPort is the port the image's sandboxes serve the code
// interpreter on (its image.LabelCodeInterpreter), or 0.
func codeInterpreterPort(img *image.Image) int {
	p, err := strconv.Atoi(img.Config.Labels[image.LabelCodeInterpreter])
	if err != nil || p <= 0 || p > 65535 || p == backend.AgentPort {
		return 0
	}
	return p
}

// agentArgs is the agent's command line for sb.
func agentArgs(sb *Sandbox) []string {
	args := []string{"--addr", fmt.Sprintf(":%d", backend.AgentPort)}
	if sb.CodeInterpreterPort != 0 {
		args = append(args, "--code-interpreter", fmt.Sprintf(":%d", sb.CodeInterpreterPort))
	}
	args = append(args, startArgs(sb)...)
	if sb.Team == poolTeam && sb.StartCmd == "" && sb.ReadyCmd == "" {
		// A warm pool's sandbox runs a login shell once before it is
		// ready (the agent's ready check), so that the first command of
		// its user finds bash, its libraries and the profile in the
		// sandbox's caches: measured in turns, the first command went
		// from 39.6–42.8 to 37.2–37.8 ms, the next ones 28–33 ms.
		args = append(args, "--ready-cmd", "true")
	}
	return args
}

// accountName is what an image's USER may be for its sandboxes' default
// user: a name (a uid, or user:group, is not taken).
var accountName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// imageAgentArgs are the agent's flags that img's config asks for: its
// WORKDIR for where commands run, and its USER (a name) for whom they run
// as, as E2B's templates set them (setWorkdir, setUser).
func imageAgentArgs(img *image.Image) []string {
	var args []string
	if w := img.Config.WorkingDir; strings.HasPrefix(w, "/") {
		args = append(args, "--workdir", w)
	}
	if u := img.Config.User; accountName.MatchString(u) {
		args = append(args, "--user", u)
	}
	return args
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newID returns a sandbox id shaped like E2B's: 20 characters of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func newToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Bounds of a create's metadata: it is kept with the sandbox and sent in
// every listing, so one create must not make listings heavy.
const (
	maxMetadataKey   = 256
	maxMetadataValue = 8 << 10
	maxMetadataTotal = 64 << 10
)

// checkMetadataSize refuses metadata past the bounds above.
func checkMetadataSize(md map[string]string) error {
	total := 0
	for k, v := range md {
		if len(k) == 0 || len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return fmt.Errorf("create: metadata key %.40q: keys take 1 to %d bytes and values at most %d: %w", k, maxMetadataKey, maxMetadataValue, errdefs.ErrInvalidArgument)
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataTotal {
		return fmt.Errorf("create: metadata of %d bytes is more than the %d a sandbox may carry: %w", total, maxMetadataTotal, errdefs.ErrInvalidArgument)
	}
	return nil
}

// BackendImage is img as a backend receives it: layers and metadata beside
// the unpacked RootFS. An image without layers on record (a stand-in of a
// test) gives nil.
func BackendImage(img *image.Image) *backend.Image {
	if img.ChainID == "" || len(img.Layers) == 0 {
		return nil
	}
	blob := func(b image.Blob) backend.Blob {
		return backend.Blob{Digest: b.Digest, MediaType: b.MediaType, Size: b.Size, Path: b.Path}
	}
	out := &backend.Image{
		ID: img.ID, Names: slices.Clone(img.Names), ChainID: img.ChainID,
		Manifest: blob(img.Manifest), Config: blob(img.ConfigBlob),
		Env: slices.Clone(img.Config.Env), User: img.Config.User, WorkingDir: img.Config.WorkingDir,
		Labels: maps.Clone(img.Config.Labels),
	}
	for _, l := range img.Layers {
		out.Layers = append(out.Layers, backend.Layer{Blob: blob(l.Blob), DiffID: l.DiffID})
	}
	return out
}
