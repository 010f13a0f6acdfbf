package sdk

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// keepaliveHeader asks the agent to send keepalive events on a stream at
// this pace (seconds), as the E2B SDKs do, so that idle streams survive
// proxies.
const (
	keepaliveHeader   = "Keepalive-Ping-Interval"
	keepaliveInterval = "50"
)

// conn is one sandbox's data plane: the agent's base URL, an HTTP client
// that adds the sandbox's headers to every request, and the Connect clients
// of the process and filesystem services. It is safe for concurrent use.
type conn struct {
	baseURL string // without a trailing slash
	// publicURL is the base of the URLs handed to others (see
	// DataPlane.PublicURL), without a trailing slash; empty: baseURL.
	publicURL string
	http      *http.Client
	token     string
	// routed reports whether requests reach the sandbox by the
	// E2b-Sandbox-Port header (a `tupper serve` or E2B data plane) rather
	// than by BaseURL's own port: it says how other ports are reached.
	routed  bool
	process processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

func newConn(dp *DataPlane) (*conn, error) {
	if dp == nil || dp.BaseURL == "" {
		return nil, fmt.Errorf("data plane has no base URL: %w", errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(dp.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("data plane base URL %q: %w: want http(s)://host[:port]", dp.BaseURL, errdefs.ErrInvalidArgument)
	}
	base := dp.Client
	if base == nil {
		base = http.DefaultClient
	}
	hc := *base
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	header := dp.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	if dp.AccessToken != "" {
		header.Set("X-Access-Token", dp.AccessToken)
	}
	if len(header) > 0 {
		hc.Transport = &headerTransport{base: rt, header: header}
	}
	c := &conn{
		baseURL:   strings.TrimRight(dp.BaseURL, "/"),
		publicURL: strings.TrimRight(dp.PublicURL, "/"),
		http:      &hc,
		token:     dp.AccessToken,
		routed:    header.Get(headerSandboxPort) != "",
	}
	// JSON is the encoding of the E2B SDKs; using it here too means the Go
	// SDK exercises exactly what they send.
	c.process = processconnect.NewProcessClient(c.http, c.baseURL, connect.WithProtoJSON())
	c.fs = filesystemconnect.NewFilesystemClient(c.http, c.baseURL, connect.WithProtoJSON())
	return c, nil
}

// headerTransport adds a fixed set of headers (routing headers, the access
// token) to each request that does not carry them already.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not change the caller's request.
	r := req.Clone(req.Context())
	for k, vs := range t.header {
		if _, ok := r.Header[k]; !ok {
			r.Header[k] = append([]string(nil), vs...)
		}
	}
	return t.base.RoundTrip(r)
}

// setUser makes a request act as user, the way envd expects it: HTTP Basic
// authorization with the user name and an empty password. An empty user
// leaves the agent's default user.
func setUser(h http.Header, user string) {
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// newRequest wraps msg in a Connect request acting as user.
func newRequest[T any](msg *T, user string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	setUser(req.Header(), user)
	return req
}

// filesURL is the URL of /files with the given query.
func (c *conn) filesURL(q url.Values) string {
	return c.baseURL + "/files?" + q.Encode()
}

// publicFilesURL is filesURL for another client: at the public URL.
func (c *conn) publicFilesURL(q url.Values) string {
	return cmp.Or(c.publicURL, c.baseURL) + "/files?" + q.Encode()
}

// portRequest makes a request for path on another port of the sandbox
// (see DataPlane): the code interpreter's, for one. A non-nil body is sent
// as JSON.
func (c *conn) portRequest(ctx context.Context, port int, method, path string, body any) (*http.Request, error) {
	base := c.baseURL
	if !c.routed {
		u, err := url.Parse(c.baseURL)
		if err != nil {
			return nil, fmt.Errorf("data plane base URL %q: %w", c.baseURL, errdefs.ErrInvalidArgument)
		}
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
		base = u.String()
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode the request: %w", err)
		}
		// A bytes.Reader gives the request a length: it is sent whole,
		// never chunked (see fixedLengthStreams).
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.routed {
		// Set on the request, it wins over the data plane's own port,
		// which headerTransport adds only where none is set.
		req.Header.Set(headerSandboxPort, strconv.Itoa(port))
	}
	return req, nil
}
