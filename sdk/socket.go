package sdk

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
)

// socketHost is the host of the requests an HTTPTransport sends through a
// unix socket. It is never resolved: the dialer knows it. A name under
// .localhost can never name another machine, should one escape.
const socketHost = "tupper.localhost"

// viaSocket returns the base URL to send requests for rawURL to, and the
// client to send them with: rawURL and client themselves for an http(s)
// URL; for a unix:// URL, http://socketHost and a copy of client whose
// connections to socketHost go to the socket (and any other as before).
func viaSocket(rawURL string, client *http.Client) (string, *http.Client, error) {
	path, ok := localsock.FromURL(rawURL)
	if !ok {
		return rawURL, client, nil
	}
	var tr *http.Transport
	switch rt := client.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = rt.Clone()
	default:
		return "", nil, fmt.Errorf("%s: HTTPClient.Transport is a %T: a unix socket needs nil or an *http.Transport, whose dialer it sets: %w", rawURL, rt, errdefs.ErrInvalidArgument)
	}
	dial := tr.DialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	addr := net.JoinHostPort(socketHost, "80")
	tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
		if a == addr {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		return dial(ctx, network, a)
	}
	proxy := tr.Proxy
	tr.Proxy = func(r *http.Request) (*url.URL, error) {
		if r.URL.Host == socketHost || proxy == nil {
			return nil, nil
		}
		return proxy(r)
	}
	c := *client
	c.Transport = tr
	return "http://" + socketHost, &c, nil
}

// isSocket reports whether rawURL names a unix socket.
func isSocket(rawURL string) bool {
	_, ok := localsock.FromURL(rawURL)
	return ok
}
