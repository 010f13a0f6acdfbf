package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// ListenOptions say where and how to serve.
type ListenOptions struct {
	// Addr is the TCP address to listen on; empty means DefaultAddr.
	Addr string
	// CertFile and KeyFile, both set, serve HTTPS.
	CertFile, KeyFile string
	// AllowInsecureRemote allows plain HTTP on an address that is not
	// loopback. API keys and sandbox tokens then cross the network in
	// the clear: use it only on a network you trust.
	AllowInsecureRemote bool
	// ShutdownTimeout bounds the wait for open requests (streams among
	// them) when ctx ends; zero means 10 seconds. Past it they are cut.
	ShutdownTimeout time.Duration
	// Ready, when set, is called with the bound address once the server
	// listens, for example to print it.
	Ready func(addr net.Addr)
	// Socket, when set, is the local socket (ListenSocket), served too,
	// in plain HTTP: its peers' credentials stand in for an API key (see
	// SocketOptions). Serve closes it, which removes the socket.
	Socket net.Listener
}

// DefaultAddr is where `tupper serve` listens unless told otherwise: the
// E2B debug default, on loopback.
const DefaultAddr = "127.0.0.1:3000"

func (o *ListenOptions) validate() error {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return fmt.Errorf("serve: give both a TLS certificate and its key, or neither: %w", errdefs.ErrInvalidArgument)
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	return nil
}

// ListenAndServe serves h on opts.Addr until ctx ends, then shuts down
// gracefully. It is Listen followed by Serve.
func ListenAndServe(ctx context.Context, h http.Handler, opts ListenOptions) error {
	ln, err := Listen(ctx, opts)
	if err != nil {
		return err
	}
	return Serve(ctx, ln, h, opts)
}

// Listen opens the listener ListenAndServe would serve on. Plain HTTP is
// refused on addresses other than loopback unless opts.AllowInsecureRemote
// is set, since API keys and tokens would cross the network in the clear.
func Listen(ctx context.Context, opts ListenOptions) (net.Listener, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.CertFile == "" && !opts.AllowInsecureRemote {
		if err := checkLoopback(ctx, opts.Addr); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return ln, nil
}

// Serve serves h on ln, and on opts.Socket when set, until ctx ends, as
// ListenAndServe does, but on a listener the caller made; it closes ln and
// opts.Socket. opts.Addr is not used and not checked.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, opts ListenOptions) error {
	if err := opts.validate(); err != nil {
		ln.Close()
		if opts.Socket != nil {
			opts.Socket.Close()
		}
		return err
	}
	srv := &http.Server{
		Handler: h,
		// No read or write timeouts: uploads and command streams last
		// as long as they need. Headers must come quickly, though.
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:       connContext,
	}
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	serving := 1
	errc := make(chan error, 2)
	go func() {
		if opts.CertFile != "" {
			errc <- srv.ServeTLS(ln, opts.CertFile, opts.KeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	if opts.Socket != nil {
		serving++
		go func() { errc <- srv.Serve(opts.Socket) }()
	}
	var first error
	select {
	case first = <-errc:
		serving--
	case <-ctx.Done():
	}
	// Either listener failing stops both, as the end of ctx does.
	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	for ; serving > 0; serving-- {
		if err := <-errc; first == nil && !errors.Is(err, http.ErrServerClosed) {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("serve: %w", first)
	}
	return nil
}

// checkLoopback fails unless every address addr may listen on is a
// loopback address.
func checkLoopback(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("serve: address %q: %v: %w", addr, err, errdefs.ErrInvalidArgument)
	}
	refuse := fmt.Errorf("serve: refusing plain HTTP on %q, which is reachable from other machines: "+
		"API keys and sandbox tokens would cross the network in the clear. "+
		"listen on 127.0.0.1, give a TLS certificate and key, or allow insecure remote access explicitly (--allow-insecure-remote): %w",
		addr, errdefs.ErrPermissionDenied)
	if host == "" {
		return refuse // every interface
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return nil
		}
		return refuse
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("serve: resolve %q: %w", host, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return refuse
		}
	}
	return nil
}
