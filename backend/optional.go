package backend

import (
	"context"
	"io"
	"net"

	"github.com/lightbearco/tupper/netpolicy"
)

// Pauser is a backend that can freeze a sandbox and thaw it again, in
// memory. The engine does not use it: its pause is a checkpoint to disk
// (Checkpointer), which frees the sandbox's memory too.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
}

// Checkpointer is a backend that can save a running sandbox's whole state
// (memory, processes, open files, its copy-on-write file system) and boot
// it again from what it saved, possibly after the host restarted, and
// possibly as another sandbox. The engine pauses, snapshots and forks
// sandboxes with it; without it, those fail with errdefs.ErrNotSupported.
type Checkpointer interface {
	// Checkpoint saves sandbox id into dir, which it makes (its parent
	// exists). With keep the sandbox runs on (a snapshot; connections
	// into it may be reset); without, it is stopped once saved and
	// everything it held is freed, as by Stop: dir is then all there is
	// of it. A failed Checkpoint leaves no dir, and the sandbox as it
	// was when it can (else stopped: its state says which).
	Checkpoint(ctx context.Context, id, dir string, keep bool) error
	// Restore boots sandbox spec.ID from the checkpoint in dir, which it
	// only reads: the same checkpoint may boot many sandboxes. spec is
	// what Start would take, for the same image as the checkpointed
	// sandbox's (else errdefs.ErrFailedPrecondition); spec.ID may be the
	// checkpointed sandbox's own (a resume) or a new one (a fork). The
	// restored sandbox keeps what its processes held, its agent's
	// environment and access token among them, and gets a network of
	// its own, whose address may differ from the one it was saved with.
	Restore(ctx context.Context, spec *Spec, dir string) (*Sandbox, error)
}

// CheckpointLog is the file of a checkpoint's directory that keeps the
// sandbox's log (what a LogReader reads), when its backend keeps one
// there: a paused sandbox's logs are read from it.
const CheckpointLog = "console.log"

// Stats is a sandbox's resource use at one moment.
type Stats struct {
	CPUUsageNanos    uint64
	MemoryUsageBytes uint64
	MemoryLimitBytes uint64
	Pids             uint64
}

// StatsReader is a backend that reports resource use from the host side.
type StatsReader interface {
	Stats(ctx context.Context, id string) (*Stats, error)
}

// LogReader is a backend that keeps a sandbox's console: what its agent
// logs (its own messages and its start command's output, a line each) and
// anything else written to the sandbox's first process's output. Logs
// opens it for reading from its start; the caller closes it. A reader that
// is also an io.Seeker lets the caller read only the console's end. Logs
// fails with errdefs.ErrNotFound for a sandbox the backend does not hold.
// Without it, the engine answers requests for logs with
// errdefs.ErrNotSupported.
type LogReader interface {
	Logs(ctx context.Context, id string) (io.ReadCloser, error)
}

// Waiter is a backend that can tell when a sandbox ends on its own: a crash,
// an out-of-memory kill, its agent exiting. Wait blocks until sandbox id has
// exited (returning nil) or ctx ends (returning ctx's error). Without it,
// the engine notices a dead sandbox only when its time runs out, when it is
// killed, or at the next restart.
type Waiter interface {
	Wait(ctx context.Context, id string) error
}

// NetworkUpdater is a backend that can change the egress policy of a
// running sandbox; connections the new policy denies are cut. Without it,
// the engine answers network updates with errdefs.ErrNotSupported.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, id string, policy *netpolicy.Policy) error
}

// NetworkObserver is a backend that remembers the connections and lookups
// that a sandbox's policy refused. Without it, the engine reports none.
type NetworkObserver interface {
	NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error)
}

// Dialer is a backend whose sandboxes are reached some other way than TCP
// to the host of Sandbox.AgentAddr: a vsock, a unix socket, a forwarded
// port. DialSandbox connects to port inside sandbox id. Without it, the
// engine dials TCP to AgentAddr's host at that port.
type Dialer interface {
	DialSandbox(ctx context.Context, id string, port int) (net.Conn, error)
}

// Exporter is a backend that can write what a sandbox changed in its file
// system since it booted (or was restored), as an OCI image layer: an
// uncompressed tar, deletions as ".wh." files. Files that belong to the
// sandbox alone (its resolver, its hosts file, the egress CA its agent
// trusts) are left out. Template builds commit sandboxes with it; without
// it they fail with errdefs.ErrNotSupported.
type Exporter interface {
	ExportChanges(ctx context.Context, id string, w io.Writer) error
}
