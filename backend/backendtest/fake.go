package backendtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// Fake is a backend for testing what sits above backends: the engine, the
// server. Its sandboxes are HTTP servers on loopback that stand in for the
// agent (by default answering 204 to everything, which satisfies /health),
// reached through its DialSandbox, as a VM backend's would be; Serve adds
// servers at other ports.
// It has every optional ability, and knobs that make it fail as real
// backends do: a State that cannot tell, Stops that fail, Starts that fail,
// sandboxes that crash on their own. It is safe for concurrent use.
type Fake struct {
	// Handler serves every sandbox's agent address; nil answers 204.
	Handler http.Handler

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	stateErr  error
	startErr  error
	stopErr   error
	stopFails int
	stopped   []string
	// opened are the configs backend.Open gave a registered Fake
	// (Register); closed counts its Close calls.
	opened []backend.Config
	closed int
}

type fakeSandbox struct {
	spec    *backend.Spec
	servers map[int]*http.Server // by port inside the sandbox
	addrs   map[int]string       // the loopback address of each port
	state   backend.State
	exited  chan struct{} // closed when the sandbox stops running
	network *netpolicy.Policy
	denials []netpolicy.Denial
}

// NewFake returns a Fake that holds no sandboxes.
func NewFake() *Fake {
	return &Fake{sandboxes: map[string]*fakeSandbox{}}
}

// The optional abilities the Fake has.
var (
	_ backend.Backend         = (*Fake)(nil)
	_ backend.Waiter          = (*Fake)(nil)
	_ backend.Pauser          = (*Fake)(nil)
	_ backend.StatsReader     = (*Fake)(nil)
	_ backend.NetworkUpdater  = (*Fake)(nil)
	_ backend.NetworkObserver = (*Fake)(nil)
	_ backend.Dialer          = (*Fake)(nil)
)

// Start serves a new stand-in agent on a loopback port.
func (f *Fake) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	if _, ok := f.sandboxes[spec.ID]; ok {
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	h := f.Handler
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	sb := &fakeSandbox{
		spec: spec, servers: map[int]*http.Server{}, addrs: map[int]string{},
		state: backend.StateRunning, exited: make(chan struct{}), network: spec.Network.Clone(),
	}
	if err := sb.serve(backend.AgentPort, h); err != nil {
		return nil, err
	}
	f.sandboxes[spec.ID] = sb
	return &backend.Sandbox{ID: spec.ID, AgentAddr: sb.addrs[backend.AgentPort], Pid: os.Getpid(), StartedAt: time.Now()}, nil
}

// serve starts h on a loopback port standing for port inside the sandbox.
func (sb *fakeSandbox) serve(port int, h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	sb.servers[port], sb.addrs[port] = srv, ln.Addr().String()
	return nil
}

// Serve starts h at port inside running sandbox id, as a user's server.
func (f *Fake) Serve(id string, port int, h http.Handler) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok || sb.state == backend.StateStopped {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if _, taken := sb.servers[port]; taken {
		return fmt.Errorf("sandbox %q: port %d: %w", id, port, errdefs.ErrAlreadyExists)
	}
	return sb.serve(port, h)
}

// DialSandbox connects to the server at port inside sandbox id; a port
// nothing serves is refused, as a real one would be.
func (f *Fake) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	sb, ok := f.sandboxes[id]
	var addr string
	if ok && sb.state != backend.StateStopped {
		addr = sb.addrs[port]
	}
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if addr == "" {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// State answers what the Fake holds, or the error set by FailState.
func (f *Fake) State(ctx context.Context, id string) (backend.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stateErr != nil {
		return "", f.stateErr
	}
	sb, ok := f.sandboxes[id]
	if !ok {
		return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb.state, nil
}

// Stop removes sandbox id, unless FailStops says this stop fails.
func (f *Fake) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil
	}
	if f.stopFails > 0 {
		f.stopFails--
		return fmt.Errorf("sandbox %q: stop: %w", id, f.stopErr)
	}
	sb.end()
	delete(f.sandboxes, id)
	f.stopped = append(f.stopped, id)
	return nil
}

// List returns every id the Fake holds, crashed ones included.
func (f *Fake) List(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.sandboxes))
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Wait blocks until sandbox id stops running (a Crash or a Stop).
func (f *Fake) Wait(ctx context.Context, id string) error {
	f.mu.Lock()
	sb, ok := f.sandboxes[id]
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	select {
	case <-sb.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pause marks sandbox id paused.
func (f *Fake) Pause(ctx context.Context, id string) error {
	return f.setState(id, backend.StateRunning, backend.StatePaused)
}

// Resume marks a paused sandbox running.
func (f *Fake) Resume(ctx context.Context, id string) error {
	return f.setState(id, backend.StatePaused, backend.StateRunning)
}

func (f *Fake) setState(id string, from, to backend.State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if sb.state != from {
		return fmt.Errorf("sandbox %q is %s, not %s: %w", id, sb.state, from, errdefs.ErrFailedPrecondition)
	}
	sb.state = to
	return nil
}

// Stats reports the sandbox's limits and no use.
func (f *Fake) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return &backend.Stats{MemoryLimitBytes: uint64(sb.spec.Resources.MemoryBytes), Pids: 1}, nil
}

// UpdateNetwork records the sandbox's new policy.
func (f *Fake) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	sb.network = p.Clone()
	return nil
}

// NetworkDenials returns what Deny recorded for sandbox id.
func (f *Fake) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return slices.Clone(sb.denials), nil
}

// FailState makes every State call answer err (a runtime that cannot
// tell); nil restores true answers.
func (f *Fake) FailState(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stateErr = err
}

// FailStarts makes every Start fail with err; nil lets them succeed.
func (f *Fake) FailStarts(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}

// FailStops makes the next n Stops of held sandboxes fail with err.
func (f *Fake) FailStops(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		err = errors.New("injected stop failure")
	}
	f.stopFails, f.stopErr = n, err
}

// Crash ends sandbox id as a crash would: its agent stops answering, State
// says stopped and Wait returns, but the Fake holds it until Stop.
func (f *Fake) Crash(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	sb.end()
	return nil
}

// Deny records a refused connection of sandbox id.
func (f *Fake) Deny(id string, d netpolicy.Denial) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.sandboxes[id]; ok {
		sb.denials = append(sb.denials, d)
	}
}

// Stopped returns the ids Stop removed, in order.
func (f *Fake) Stopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stopped)
}

// Spec returns the spec sandbox id was started with, nil if none is held.
func (f *Fake) Spec(id string) *backend.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.sandboxes[id]; ok {
		return sb.spec
	}
	return nil
}

// Network returns the policy sandbox id now has.
func (f *Fake) Network(id string) *netpolicy.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.sandboxes[id]; ok {
		return sb.network.Clone()
	}
	return nil
}

// Opened returns the configs with which backend.Open opened f, once
// Register made it a registered backend, in order.
func (f *Fake) Opened() []backend.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.opened)
}

// Close counts a close, as a backend that holds services of its own
// would take it; sandboxes keep running.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

// Closed returns how often Close was called.
func (f *Fake) Closed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// end stops a sandbox's stand-in agent once; callers hold f.mu.
func (sb *fakeSandbox) end() {
	if sb.state == backend.StateStopped {
		return
	}
	sb.state = backend.StateStopped
	for _, srv := range sb.servers {
		srv.Close()
	}
	close(sb.exited)
}
