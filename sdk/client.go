package sdk

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Client creates, finds and kills sandboxes through its Transport. The zero
// value is usable: without a Transport, the first call builds an
// HTTPTransport from the environment (see HTTPConfigFromEnv:
// TUPPER_API_URL and TUPPER_API_KEY, else E2B_API_URL and E2B_API_KEY), and
// fails with ErrNoEndpoint while no URL is set. A Client is safe for
// concurrent use; set Transport before the first call and not after.
type Client struct {
	// Transport reaches Tupper: the in-process engine (package local) or
	// a remote `tupper serve` (NewHTTPTransport). Nil means the HTTP
	// transport the environment describes.
	Transport Transport

	mu sync.Mutex
	// fromEnv is the transport built from the environment, once one was.
	fromEnv Transport
}

// DefaultClient is the Client of the package-level functions Create,
// Connect, List and Kill.
var DefaultClient = &Client{}

// CreateOptions describes a sandbox to create. The zero value asks for a
// sandbox of the "base" template with the server's defaults.
type CreateOptions struct {
	// Template names the template; empty means "base".
	Template string
	// Image names an image reference directly, instead of a template.
	Image string
	// Timeout is how long the sandbox lives before it is killed (see
	// Sandbox.SetTimeout); 0 means the server's default.
	Timeout time.Duration
	// Metadata are key/values to find the sandbox by with List.
	Metadata map[string]string
	// Envs is the environment of every command in the sandbox.
	Envs map[string]string
	// CPUs and MemoryMB are the sandbox's limits; 0 means the default.
	CPUs     float64
	MemoryMB int
	// DiskMB caps what the sandbox writes to its file system (its root and
	// /tmp together); 0 means the server's default. A write past it fails
	// inside with ENOSPC, and Files.Write with an error that IsDiskFull
	// reports. More than the server's maximum is refused.
	DiskMB int
	// Network is the sandbox's egress policy, as E2B's `network` option:
	// AllowOut (CIDRs, IPs, domains, "*.domain") wins over DenyOut (CIDRs,
	// IPs; "0.0.0.0/0" denies all), and Rules add headers to HTTPS
	// requests for a domain on the host, so that secrets never enter the
	// sandbox. Nil means the server's default (the internet, unless the
	// daemon runs with --egress deny).
	Network *NetworkPolicy
	// AllowInternetAccess false denies all egress but what Network's
	// AllowOut names; nil leaves Network alone.
	AllowInternetAccess *bool
	// Backend names the sandbox backend to run on, such as "gvisor" or
	// "runc" (`tupper doctor` lists those of a host and whether they
	// work); empty means the server's default, the one `tupper serve
	// --backend` names. A name the server does not have is refused with
	// an error that IsInvalidArgument reports, listing the known ones; one
	// that does not work on its host, with one that IsUnavailable
	// reports. A Tupper extension: E2B's API ignores it.
	Backend string
	// OnTimeout is what happens when the sandbox's time is up:
	// OnTimeoutKill (the default, as is empty) or OnTimeoutPause, which
	// saves it to disk with its processes, memory and files, to be
	// brought back by Connect (see Sandbox.Pause). E2B's lifecycle option.
	OnTimeout OnTimeout
	// AutoResume, with OnTimeout pause, wakes the paused sandbox when a
	// request reaches it (a command, a file, a port) rather than on
	// Connect alone.
	AutoResume bool
	// PauseFilesOnly asks that the pause at the timeout keep the
	// sandbox's files alone, as E2B's autoPauseMemory false does; it
	// rules AutoResume out. Tupper keeps the memory all the same.
	PauseFilesOnly bool
	// VolumeMounts mount volumes of the API key's team (Client.CreateVolume),
	// read-write, each at its Path, as E2B's volumeMounts: several
	// sandboxes may mount one at once, and what they write stays. A path
	// under /proc, /dev or /sys, or /etc itself, is refused.
	VolumeMounts []VolumeMount
}

// OnTimeout says what happens to a sandbox when its time is up.
type OnTimeout string

// The values of CreateOptions.OnTimeout.
const (
	OnTimeoutKill  OnTimeout = "kill"
	OnTimeoutPause OnTimeout = "pause"
)

// ListOptions filters a listing of sandboxes.
type ListOptions struct {
	// Metadata keeps the sandboxes whose metadata hold all these pairs.
	Metadata map[string]string
	// States keeps the sandboxes in these states ("running", "paused");
	// empty means all.
	States []string
	// Limit is the page size; 0 means the server's default.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

func (c *Client) transport() (Transport, error) {
	if c == nil {
		return nil, ErrNoEndpoint
	}
	if c.Transport != nil {
		return c.Transport, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fromEnv != nil {
		return c.fromEnv, nil
	}
	// Only a transport that was built is kept: a program may set the
	// environment after a first call failed.
	t, err := NewHTTPTransport(HTTPConfigFromEnv())
	if err != nil {
		return nil, err
	}
	c.fromEnv = t
	return t, nil
}

// Create creates a sandbox and returns it ready for commands and files.
func (c *Client) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	if opts.OnTimeout != "" && opts.OnTimeout != OnTimeoutKill && opts.OnTimeout != OnTimeoutPause {
		return nil, fmt.Errorf("create sandbox: OnTimeout %q: want %q or %q: %w", opts.OnTimeout, OnTimeoutKill, OnTimeoutPause, errdefs.ErrInvalidArgument)
	}
	var pauseMemory *bool
	if opts.PauseFilesOnly {
		pauseMemory = new(bool)
	}
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	info, err := t.CreateSandbox(ctx, CreateRequest{
		Template:            opts.Template,
		Image:               opts.Image,
		Timeout:             opts.Timeout,
		Metadata:            maps.Clone(opts.Metadata),
		Env:                 maps.Clone(opts.Envs),
		CPUs:                opts.CPUs,
		MemoryMB:            opts.MemoryMB,
		DiskMB:              opts.DiskMB,
		Network:             opts.Network.Clone(),
		AllowInternetAccess: opts.AllowInternetAccess,
		Backend:             opts.Backend,
		VolumeMounts:        slices.Clone(opts.VolumeMounts),
		AutoPause:           opts.OnTimeout == OnTimeoutPause,
		AutoPauseMemory:     pauseMemory,
		AutoResume:          opts.AutoResume,
	})
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	sb, err := c.open(ctx, t, info)
	if err != nil {
		// The caller never sees this sandbox: do not leave it running.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = t.KillSandbox(kctx, info.SandboxID)
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return sb, nil
}

// Connect returns the running sandbox id (resuming it if it is paused).
func (c *Client) Connect(ctx context.Context, id string) (*Sandbox, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	info, err := t.ConnectSandbox(ctx, id, 0)
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %q: %w", id, err)
	}
	sb, err := c.open(ctx, t, info)
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %q: %w", id, err)
	}
	return sb, nil
}

func (c *Client) open(ctx context.Context, t Transport, info *SandboxInfo) (*Sandbox, error) {
	dp, err := t.DataPlane(ctx, info.SandboxID)
	if err != nil {
		return nil, err
	}
	cn, err := newConn(dp)
	if err != nil {
		return nil, err
	}
	return newSandbox(c, *info, cn), nil
}

// List returns one page of sandboxes and the token of the next page, which
// is empty on the last page. See also NewPaginator.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]SandboxInfo, string, error) {
	t, err := c.transport()
	if err != nil {
		return nil, "", err
	}
	page, err := t.ListSandboxes(ctx, ListQuery{
		Metadata:  maps.Clone(opts.Metadata),
		States:    slices.Clone(opts.States),
		Limit:     opts.Limit,
		NextToken: opts.NextToken,
	})
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	return page.Sandboxes, page.NextToken, nil
}

// Kill kills sandbox id. A sandbox that does not exist is an error of class
// errdefs.ErrNotFound.
func (c *Client) Kill(ctx context.Context, id string) error {
	t, err := c.transport()
	if err != nil {
		return err
	}
	if err := t.KillSandbox(ctx, id); err != nil {
		return fmt.Errorf("kill sandbox %q: %w", id, err)
	}
	return nil
}

// GetInfo describes sandbox id.
func (c *Client) GetInfo(ctx context.Context, id string) (*SandboxInfo, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	info, err := t.GetSandbox(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get sandbox %q: %w", id, err)
	}
	return info, nil
}

// SetTimeout makes sandbox id live for timeout from now.
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	t, err := c.transport()
	if err != nil {
		return err
	}
	if err := t.SetTimeout(ctx, id, timeout); err != nil {
		return fmt.Errorf("set timeout of sandbox %q: %w", id, err)
	}
	return nil
}

// Paginator walks a listing of sandboxes page by page, like the E2B SDKs'
// SandboxPaginator. It is not safe for concurrent use.
type Paginator struct {
	c    *Client
	opts ListOptions
	done bool
}

// NewPaginator returns a Paginator over the sandboxes that opts selects,
// starting at opts.NextToken.
func (c *Client) NewPaginator(opts ListOptions) *Paginator {
	return &Paginator{c: c, opts: opts}
}

// HasNext reports whether Next has another page to return.
func (p *Paginator) HasNext() bool { return !p.done }

// NextToken returns the token of the page Next returns next.
func (p *Paginator) NextToken() string { return p.opts.NextToken }

// Next returns the next page. After the last page, HasNext is false and
// Next returns nothing.
func (p *Paginator) Next(ctx context.Context) ([]SandboxInfo, error) {
	if p.done {
		return nil, nil
	}
	items, next, err := p.c.List(ctx, p.opts)
	if err != nil {
		return nil, err
	}
	p.opts.NextToken = next
	p.done = next == ""
	return items, nil
}

// Create creates a sandbox with DefaultClient.
func Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	return DefaultClient.Create(ctx, opts)
}

// Connect connects to sandbox id with DefaultClient.
func Connect(ctx context.Context, id string) (*Sandbox, error) {
	return DefaultClient.Connect(ctx, id)
}

// List lists sandboxes with DefaultClient.
func List(ctx context.Context, opts ListOptions) ([]SandboxInfo, string, error) {
	return DefaultClient.List(ctx, opts)
}

// Kill kills sandbox id with DefaultClient.
func Kill(ctx context.Context, id string) error {
	return DefaultClient.Kill(ctx, id)
}
