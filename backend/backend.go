// Package backend defines what a sandbox backend is: the small interface that
// boots an isolated environment with the Tupper agent inside it, a registry
// that backends join by name, and the optional abilities a backend may add.
//
// The engine only ever sees these interfaces; it never imports a concrete
// backend. A backend package registers itself in an init function, so a
// program links the backends it wants with blank imports:
//
//	import _ "github.com/lightbearco/tupper/backend/gvisor"
package backend

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lightbearco/tupper/netpolicy"
)

// AgentPort is the TCP port the agent listens on inside every sandbox. It is
// the envd port of the E2B protocol.
const AgentPort = 49983

// AgentMountDir is the directory inside the sandbox where backends mount the
// agent binary, read-only.
const AgentMountDir = "/.tupper"

// Variables through which a backend tells the agent about the sandbox's
// network. The agent writes /etc/resolv.conf, /etc/hosts and the system
// trust store from them, and removes them before it starts any process.
const (
	// EnvNameserver is the sandbox's resolver address.
	EnvNameserver = "TUPPER_NAMESERVER"
	// EnvSandboxAddr is the sandbox's own address, for /etc/hosts.
	EnvSandboxAddr = "TUPPER_SANDBOX_ADDR"
	// EnvTrustCA is a PEM certificate the sandbox must trust (the egress
	// proxy's CA).
	EnvTrustCA = "TUPPER_TRUST_CA"
)

// Backend boots and stops sandboxes. Implementations must be safe for
// concurrent use. A sandbox's life is never tied to the ctx of a call: ctx
// bounds only the call itself.
type Backend interface {
	// Start boots the sandbox described by spec, with the agent running as
	// its first process, and returns how to reach it. Start returns once
	// the sandbox process runs; the caller waits for the agent to answer.
	// A failed Start leaves nothing behind. Starting an id that the
	// backend already holds fails with errdefs.ErrAlreadyExists.
	Start(ctx context.Context, spec *Spec) (*Sandbox, error)

	// State reports the state of sandbox id. It fails with
	// errdefs.ErrNotFound when the backend holds nothing for id.
	State(ctx context.Context, id string) (State, error)

	// Stop kills sandbox id and removes everything the backend made for
	// it: processes, mounts, cgroups, namespaces, interfaces and state
	// files. Stop is idempotent: stopping an id the backend holds nothing
	// for returns nil.
	Stop(ctx context.Context, id string) error

	// List returns the ids of every sandbox the backend holds anything
	// for, running or not, including leftovers of an earlier process that
	// crashed. The engine stops those it has no record of.
	List(ctx context.Context) ([]string, error)
}

// Spec describes a sandbox to boot.
type Spec struct {
	// ID names the sandbox: 1 to 40 characters of [a-z0-9-].
	ID string
	// RootFS is the host path of the unpacked image. It is shared by every
	// sandbox of that image and must never be written: backends give each
	// sandbox a copy-on-write view of it.
	RootFS string
	// Image is the same image as layers and metadata, for backends that
	// need it in another form than a directory; nil when the root came
	// from elsewhere than the image store (a test's directory).
	Image *Image
	// Env is the environment of the agent, KEY=VALUE; the agent passes it
	// on to the processes it starts.
	Env []string
	// Hostname is the sandbox's host name; empty means the ID.
	Hostname string
	// Agent is the agent binary and its arguments.
	Agent Agent
	// Resources are the sandbox's limits.
	Resources Resources
	// Labels are opaque key/values a backend may record for debugging.
	Labels map[string]string
	// Network is the sandbox's egress policy; nil allows all egress. A
	// backend whose host has egress turned off (Config.Network.NoEgress)
	// gives the sandbox none whatever this says.
	Network *netpolicy.Policy
	// Mounts are host directories bound read-write into the sandbox, in
	// order: volumes, which other sandboxes may mount at the same time
	// and the host may change, so a backend must not cache what they
	// hold beyond what a shared file system allows (a write in one
	// sandbox is seen by the others' next reads).
	Mounts []Mount
}

// Mount binds the host directory Source at Destination in the sandbox.
// Destination is absolute and clean, and the engine keeps it off the
// sandbox's system directories.
type Mount struct {
	Source      string
	Destination string
}

// Agent says which agent binary to run and how.
type Agent struct {
	// Path is the host path of the static agent binary. Backends mount it
	// read-only at AgentMountDir inside the sandbox.
	Path string
	// Args are the agent's arguments (not including argv[0]).
	Args []string
}

// Resources are a sandbox's limits. A zero field means the backend's default.
type Resources struct {
	// CPUs is the CPU quota in cores (0.5 is half a core).
	CPUs float64
	// MemoryBytes is the memory limit; the sandbox is OOM-killed inside
	// above it.
	MemoryBytes int64
	// Pids is the largest number of processes and threads.
	Pids int64
	// DiskBytes caps what the sandbox writes to its file system (its root
	// and /tmp together); a write past it fails with ENOSPC inside.
	DiskBytes int64
}

// Sandbox is what a backend reports about a sandbox it started. The engine
// stores it and gives it back to the backend after a restart.
type Sandbox struct {
	ID string
	// AgentAddr is the host:port at which the engine reaches the agent
	// (and, at other ports of that host, the sandbox's servers), unless
	// the backend is a Dialer; then it is for diagnostics only.
	AgentAddr string
	// Pid is the host pid of the sandbox's root process, for diagnostics.
	Pid int
	// StartedAt is when the sandbox was started.
	StartedAt time.Time
	// Nameserver is the resolver the sandbox was given (the address of
	// backend.EnvNameserver), empty when the backend gives none. A
	// sandbox restored from a checkpoint (Checkpointer) is told it anew:
	// its agent still holds the one of the network it was saved in.
	Nameserver string
}

// State is the state of a sandbox as its backend sees it.
type State string

const (
	// StateRunning means the sandbox runs and its agent can be reached.
	StateRunning State = "running"
	// StatePaused means the sandbox is frozen and may be resumed.
	StatePaused State = "paused"
	// StateStopped means the sandbox has exited (or crashed) but its
	// resources are still held until Stop.
	StateStopped State = "stopped"
)

// Config is what the registry passes a backend's Factory.
type Config struct {
	// Root is a directory the backend owns for its state. Two backends
	// must never share one. Leftovers found here after a crash are
	// reported by List.
	Root string
	// Logger receives the backend's logs; nil means slog.Default().
	Logger *slog.Logger
	// Options are backend-specific settings, documented by each backend.
	Options map[string]string
	// Network is the host's side of the sandboxes' networking, for
	// backends that give sandboxes a network of their own.
	Network NetworkConfig
}

// NetworkConfig is the operator's side of sandbox networking: what no
// sandbox's own policy changes.
type NetworkConfig struct {
	// NoEgress seals every sandbox: it reaches neither the host nor
	// anything beyond it, and its lookups fail at once.
	NoEgress bool
	// NoIPv6 keeps sandboxes on IPv4 even where the host has an IPv6
	// route out; by default they get IPv6 egress when it does.
	NoIPv6 bool
	// DNSUpstreams are the resolvers ("host:port") that sandbox lookups
	// are forwarded to; empty means the host's own.
	DNSUpstreams []string
	// Exempt lists destinations that sandboxes may reach although they
	// are private, link-local or the host's own (see
	// netpolicy.AlwaysDenied); each sandbox's policy still applies.
	Exempt []netip.Prefix
	// UpstreamCAs are extra PEM certificates, beside the host's roots,
	// that the egress proxy trusts when it connects to servers on a
	// sandbox's behalf (a corporate TLS proxy, a test server).
	UpstreamCAs []byte
	// Secrets returns the value of secret id, which a header of sandbox
	// sandbox's network rules uses (netpolicy.SecretRef), as the egress
	// proxy sends a request; nil means none resolves, and such requests
	// fail rather than go out without it.
	Secrets func(ctx context.Context, sandbox, id string) (string, error)
}
