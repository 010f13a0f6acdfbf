package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/lightbearco/tupper/engine"
)

// newAgentTransport returns the transport of requests to sandboxes. URLs
// name a sandbox's port with engine.SandboxAddr and the engine dials it
// (so the pool of kept-alive connections is keyed by sandbox, never by a
// reusable address, and the engine cuts them when the sandbox dies).
func newAgentTransport(e *engine.Engine, dialTimeout time.Duration) *http.Transport {
	return &http.Transport{
		// Never through an HTTP proxy from the environment: sandboxes are
		// local.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			c, err := e.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return blockConn{c}, nil
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// Bodies pass through as the sandbox encoded them; the client's
		// Accept-Encoding decides.
		DisableCompression: true,
	}
}
