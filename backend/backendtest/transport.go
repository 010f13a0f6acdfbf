package backendtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// transport is an sdk.Transport over sandboxes the suite started itself:
// the data plane of each is its agent's address; the control plane, which
// is the engine's business, is not there.
type transport struct {
	mu    sync.Mutex
	addrs map[string]string // sandbox id → agent host:port
}

func newTransport() *transport { return &transport{addrs: map[string]string{}} }

func (tr *transport) add(id, addr string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.addrs[id] = addr
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
	return &sdk.DataPlane{BaseURL: "http://" + a}, nil
}
