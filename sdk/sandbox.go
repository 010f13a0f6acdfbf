package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// Sandbox is a running sandbox: run commands in it (Commands), use its
// files (Files) and terminals (PTY). Get one from Create or Connect. A
// Sandbox is safe for concurrent use; it holds no resources of its own, so
// dropping it leaves the sandbox running until Kill or its timeout.
type Sandbox struct {
	// Commands runs and manages processes.
	Commands *Commands
	// Files reads, writes and watches files.
	Files *Files
	// PTY runs interactive terminals.
	PTY *PTY

	client *Client
	info   SandboxInfo
	conn   *conn
}

func newSandbox(c *Client, info SandboxInfo, cn *conn) *Sandbox {
	cmds := &Commands{c: cn}
	return &Sandbox{
		Commands: cmds,
		Files:    &Files{c: cn},
		PTY:      &PTY{cmds: cmds},
		client:   c,
		info:     info,
		conn:     cn,
	}
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.info.SandboxID }

// Info returns what Create or Connect learnt about the sandbox; GetInfo
// asks again.
func (s *Sandbox) Info() SandboxInfo { return s.info }

// Kill kills the sandbox.
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.client.Kill(ctx, s.ID())
}

// SetTimeout makes the sandbox live for timeout from now, extending or
// shortening its earlier timeout.
func (s *Sandbox) SetTimeout(ctx context.Context, timeout time.Duration) error {
	return s.client.SetTimeout(ctx, s.ID(), timeout)
}

// GetInfo describes the sandbox as it is now.
func (s *Sandbox) GetInfo(ctx context.Context) (*SandboxInfo, error) {
	return s.client.GetInfo(ctx, s.ID())
}

// IsRunning reports whether the sandbox's agent answers. A 502 from a
// Tupper server (no such sandbox) or a refused connection means false;
// other failures are errors.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.conn.baseURL+"/health", nil)
	if err != nil {
		return false, err
	}
	resp, err := s.conn.http.Do(req)
	if err != nil {
		// Refused or unreachable: nothing listens there any more.
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
			return false, nil
		}
		return false, fmt.Errorf("sandbox %q health: %w", s.ID(), fromTransport(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway:
		return false, nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return true, nil
	}
	return false, fmt.Errorf("sandbox %q health: %w", s.ID(), fromResponse(resp))
}
