package engine

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// slowLookFake is a Fake whose agents never answer and whose State, like
// a runtime under load, answers only when its caller's time is up.
type slowLookFake struct{ *backendtest.Fake }

func (slowLookFake) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

func (slowLookFake) State(ctx context.Context, id string) (backend.State, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// TestBootTimeoutIsNotAStop checks that a boot whose time runs out while
// the engine looks at the sandbox's state is reported as the timeout it
// is, not as a sandbox that stopped while booting.
func TestBootTimeoutIsNotAStop(t *testing.T) {
	e := newEngineOn(t, slowLookFake{backendtest.NewFake()}, func(c *Config) { c.BootTimeout = 500 * time.Millisecond })
	_, err := e.Create(context.Background(), CreateOptions{})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || strings.Contains(err.Error(), "stopped while booting") {
		t.Fatalf("create whose boot timed out during a state look = %v, want a deadline error", err)
	}
}
