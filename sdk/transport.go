package sdk

import (
	"context"
	"net/http"
	"time"
)

// Transport is how a Client reaches Tupper: the control-plane calls that
// create and manage sandboxes, and the way to each sandbox's agent (the data
// plane). The in-process engine (package local) and the HTTP client of a
// remote `tupper serve` both implement it. Implementations must be safe for
// concurrent use and must report errors wrapping the errdefs classes.
type Transport interface {
	CreateSandbox(ctx context.Context, req CreateRequest) (*SandboxInfo, error)
	// ConnectSandbox returns a running sandbox; timeout > 0 also resets
	// its time to live, as E2B's connect does.
	ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*SandboxInfo, error)
	ListSandboxes(ctx context.Context, q ListQuery) (*ListPage, error)
	GetSandbox(ctx context.Context, id string) (*SandboxInfo, error)
	SetTimeout(ctx context.Context, id string, timeout time.Duration) error
	KillSandbox(ctx context.Context, id string) error
	// DataPlane tells how to reach the agent of sandbox id.
	DataPlane(ctx context.Context, id string) (*DataPlane, error)
}

// DataPlane says how to reach one sandbox's agent, which speaks the envd
// protocol (Connect RPC for processes and the filesystem, plain HTTP for
// /files). Other ports of the sandbox, such as the code interpreter's, are
// reached the same way with the port changed: in Header's
// E2b-Sandbox-Port when Header has one, else in BaseURL.
type DataPlane struct {
	// BaseURL is the agent's URL, for example http://10.213.0.6:49983,
	// or a name that only Client's dialer knows (an in-process engine's).
	BaseURL string
	// Client carries the requests; nil means http.DefaultClient.
	Client *http.Client
	// Header is added to every request (routing headers, access token).
	Header http.Header
	// AccessToken signs /files URLs; empty when the sandbox has none.
	AccessToken string
	// PublicURL is where the URLs Sandbox.DownloadURL and UploadURL hand
	// out point, for clients other than this one; empty means BaseURL.
	// A transport over a unix socket, whose BaseURL only its own dialer
	// knows, sets it to the daemon's TCP address.
	PublicURL string
}

// CreateRequest describes a sandbox to create.
type CreateRequest struct {
	// Template names a template (an image alias); empty means "base".
	Template string
	// Image names an image reference directly, instead of a template.
	Image string
	// Timeout is how long the sandbox lives before it is killed; 0 means
	// the server's default.
	Timeout time.Duration
	// Metadata are key/values to find the sandbox by.
	Metadata map[string]string
	// Env is the environment of every command in the sandbox.
	Env map[string]string
	// CPUs and MemoryMB are the sandbox's limits; 0 means the default.
	CPUs     float64
	MemoryMB int
	// DiskMB is the sandbox's disk cap; 0 means the default.
	DiskMB int
	// Network and AllowInternetAccess are the egress policy (see
	// CreateOptions.Network).
	Network             *NetworkPolicy
	AllowInternetAccess *bool
	// Backend names the backend to run the sandbox on; empty means the
	// server's default (see CreateOptions.Backend).
	Backend string
	// AutoPause pauses the sandbox at its timeout instead of killing it;
	// AutoPauseMemory false asks that pause to keep its files alone (nil
	// means its memory too); AutoResume wakes it when a request reaches
	// it. E2B's create options of those names (see CreateOptions.OnTimeout).
	AutoPause       bool
	AutoPauseMemory *bool
	AutoResume      bool
	// VolumeMounts are the volumes to mount (see CreateOptions.VolumeMounts).
	VolumeMounts []VolumeMount
}

// NetworkTransport is a Transport that can change a running sandbox's
// egress policy and report what it refused. Without it, Sandbox.SetNetwork
// and Sandbox.NetworkDenials fail with errdefs.ErrNotSupported.
type NetworkTransport interface {
	UpdateNetwork(ctx context.Context, id string, policy *NetworkPolicy, allowInternetAccess *bool) error
	NetworkDenials(ctx context.Context, id string) ([]NetworkDenial, error)
}

// CheckpointTransport is a Transport that can save sandboxes: pause them
// to disk, snapshot them while they run on, and fork them. Without it,
// Sandbox.Pause, Sandbox.CreateSnapshot, Sandbox.Fork,
// Client.ListSnapshots and Client.DeleteSnapshot fail with
// errdefs.ErrNotSupported; ConnectSandbox, which every Transport has,
// resumes what a pause saved.
type CheckpointTransport interface {
	// PauseSandbox saves running sandbox id to disk and frees what it
	// held; keepMemory false asks for its files alone. A sandbox that is
	// not running fails with errdefs.ErrFailedPrecondition.
	PauseSandbox(ctx context.Context, id string, keepMemory bool) error
	// CreateSnapshot saves running sandbox id, which runs on, as a
	// snapshot that creates name as their template; name is optional.
	CreateSnapshot(ctx context.Context, id, name string) (*SnapshotInfo, error)
	ListSnapshots(ctx context.Context, q SnapshotQuery) (*SnapshotPage, error)
	// DeleteSnapshot removes the snapshot that ref (its id or a name)
	// names; sandboxes started from it run on.
	DeleteSnapshot(ctx context.Context, ref string) error
	// ForkSandbox starts count sandboxes from sandbox id as it is now,
	// each living timeout (0: the source's), and reports each on its
	// own; the error is for the fork as a whole.
	ForkSandbox(ctx context.Context, id string, count int, timeout time.Duration) ([]ForkedSandbox, error)
}

// SnapshotQuery filters a listing of snapshots.
type SnapshotQuery struct {
	// SandboxID keeps the snapshots of this sandbox; Name those with this
	// name. Empty means all.
	SandboxID string
	Name      string
	// Limit is the page size; 0 means the server's default.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

// SnapshotPage is one page of a listing of snapshots.
type SnapshotPage struct {
	Snapshots []SnapshotInfo
	// NextToken is non-empty when there are more snapshots.
	NextToken string
}

// ForkedSandbox is one sandbox of a fork as a transport reports it: the
// sandbox, or why it did not start.
type ForkedSandbox struct {
	Info *SandboxInfo
	Err  error
}

// ListQuery filters a listing of sandboxes.
type ListQuery struct {
	// Metadata keeps the sandboxes whose metadata hold all these pairs.
	Metadata map[string]string
	// States keeps sandboxes in these states ("running", "paused"); empty
	// means all.
	States []string
	// Limit is the page size; 0 means the server's default.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

// ListPage is one page of a listing.
type ListPage struct {
	Sandboxes []SandboxInfo
	// NextToken is non-empty when there are more sandboxes.
	NextToken string
}

// SandboxInfo describes a sandbox.
type SandboxInfo struct {
	SandboxID   string
	TemplateID  string
	Alias       string
	Metadata    map[string]string
	State       string
	StartedAt   time.Time
	EndAt       time.Time
	CPUCount    int
	MemoryMB    int
	DiskSizeMB  int
	EnvdVersion string
	// EnvdAccessToken is the token data-plane calls must carry; empty when
	// the sandbox has none.
	EnvdAccessToken string
	// Network and AllowInternetAccess are the sandbox's egress settings,
	// as its create or last update gave them; a listing leaves them out.
	Network             *NetworkPolicy
	AllowInternetAccess *bool
	// Backend names the backend the sandbox runs on ("gvisor", "runc"…),
	// a Tupper extension; empty from servers that do not say (E2B).
	Backend string
}
