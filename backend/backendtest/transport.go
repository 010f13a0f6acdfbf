package backendtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// transport is an sdk.Transport over sandboxes the suite started itself:
// the data plane of each is its agent's address, reached as the engine
// reaches it (through DialSandbox when the backend is a backend.Dialer);
// the control plane, which is the engine's business, is not there.
type transport struct {
	b     backend.Backend
	mu    sync.Mutex
	addrs map[string]string // sandbox id → agent host:port
}

func newTransport(b backend.Backend) *transport {
	return &transport{b: b, addrs: map[string]string{}}
}

// client is the HTTP client that reaches sandbox id: over TCP to the
// address asked for, or through the backend's DialSandbox at its port.
func (tr *transport) client(id string, timeout time.Duration) *http.Client {
	d, ok := tr.b.(backend.Dialer)
	if !ok {
		return &http.Client{Timeout: timeout}
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			return d.DialSandbox(ctx, id, port)
		},
	}}
}

// add records sandbox id's agent address and returns the host:port at
// which the suite's HTTP reaches the agent: the address itself, or a name
// of the sandbox's where the backend dials (its address is then for
// diagnostics only).
func (tr *transport) add(id, addr string) string {
	if _, ok := tr.b.(backend.Dialer); ok {
		addr = net.JoinHostPort(id+".sandbox", strconv.Itoa(backend.AgentPort))
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.addrs[id] = addr
	return addr
}

func (tr *transport) addr(id string) (string, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	a, ok := tr.addrs[id]
	if !ok {
		return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return a, nil
}

func (tr *transport) CreateSandbox(context.Context, sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	return nil, fmt.Errorf("create sandbox: %w: the conformance suite starts sandboxes through the backend", errdefs.ErrNotSupported)
}

func (tr *transport) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*sdk.SandboxInfo, error) {
	if _, err := tr.addr(id); err != nil {
		return nil, err
	}
	return &sdk.SandboxInfo{SandboxID: id, State: "running"}, nil
}

func (tr *transport) ListSandboxes(context.Context, sdk.ListQuery) (*sdk.ListPage, error) {
	return nil, fmt.Errorf("list sandboxes: %w", errdefs.ErrNotSupported)
}

func (tr *transport) GetSandbox(context.Context, string) (*sdk.SandboxInfo, error) {
	return nil, fmt.Errorf("get sandbox: %w", errdefs.ErrNotSupported)
}

func (tr *transport) SetTimeout(context.Context, string, time.Duration) error {
	return fmt.Errorf("set timeout: %w", errdefs.ErrNotSupported)
}

func (tr *transport) KillSandbox(context.Context, string) error {
	return fmt.Errorf("kill sandbox: %w", errdefs.ErrNotSupported)
}

func (tr *transport) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	a, err := tr.addr(id)
	if err != nil {
		return nil, err
	}
	return &sdk.DataPlane{BaseURL: "http://" + a, Client: tr.client(id, 0)}, nil
}
