package backend

import (
	"context"
	"net"

	"github.com/lightbearco/tupper/netpolicy"
)

// Pauser is a backend that can freeze a sandbox and thaw it again. The
// engine does not use it yet: pause and resume answer "not supported"
// whatever the backend (they are the next piece of work).
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
}

// Checkpointer is a backend that can save a sandbox's whole state (memory,
// processes, files) to dir and later restore it, possibly after the host
// restarted. The engine does not use it yet (see Pauser).
type Checkpointer interface {
	Checkpoint(ctx context.Context, id, dir string) error
	Restore(ctx context.Context, spec *Spec, dir string) (*Sandbox, error)
}

// Stats is a sandbox's resource use at one moment.
type Stats struct {
	CPUUsageNanos    uint64
	MemoryUsageBytes uint64
	MemoryLimitBytes uint64
	Pids             uint64
}

// StatsReader is a backend that reports resource use from the host side.
// The engine does not use it yet: sandbox metrics come from the agent
// inside the sandbox.
type StatsReader interface {
	Stats(ctx context.Context, id string) (*Stats, error)
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
