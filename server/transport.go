package server

import (
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"time"
)

// Sandbox addresses are reused: a new sandbox often gets the IP of one just
// killed. A connection pool keyed by IP would then hand the new sandbox's
// requests a kept-alive connection to the dead one, whose network namespace
// vanished without a FIN; the request fails with "connection reset", or,
// where the old end still answers, reaches the wrong sandbox. So the pool
// is keyed by sandbox: requests name a synthetic host that carries the
// sandbox id and the real address, and the dialer decodes it.

// poolDomain ends the synthetic host names; .invalid never resolves, so a
// name that escaped the dialer could not reach anything.
const poolDomain = ".tupper.invalid"

// poolHost returns the host:port a request to addr inside sandbox id names,
// "<hex(host)>.<id>.tupper.invalid:<port>".
func poolHost(id, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(hex.EncodeToString([]byte(host))+"."+id+poolDomain, port)
}

// realAddr undoes poolHost; other addresses pass unchanged.
func realAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.HasSuffix(host, poolDomain) {
		return addr
	}
	enc, _, _ := strings.Cut(host, ".")
	raw, err := hex.DecodeString(enc)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(string(raw), port)
}

// newAgentTransport returns the transport of requests to sandboxes.
func newAgentTransport(dialTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		// Never through an HTTP proxy from the environment: sandbox
		// addresses are local.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, realAddr(addr))
		},
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// Bodies pass through as the sandbox encoded them; the client's
		// Accept-Encoding decides.
		DisableCompression: true,
	}
}
