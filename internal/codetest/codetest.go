// Package codetest runs Tupper's real code interpreter (agent/interpreter)
// on the host, behind a data plane shaped like that of `tupper serve`, for
// the tests of its clients: the SDK, the MCP tools and the CLI. It needs
// Debian's python3 with ipykernel (scripts/setup.sh installs it) and node;
// tests skip without them.
//
// The front routes as the daemon does: by the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers. Port 49999 of a sandbox made with DataPlane is
// the interpreter; every other port, and port 49999 of a sandbox made with
// BareDataPlane, answers 502 as the daemon does for a port nothing listens
// on. An unknown sandbox answers 502 too, as a killed one does.
// DirectDataPlane reaches the interpreter by address instead, as the
// in-process engine reaches sandboxes, and Transport hands the sandboxes
// made so far to an sdk.Client.
package codetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/agent/interpreter"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// Token is the sandboxes' access token, which /execute requires.
const Token = "codetest-token"

// python is Debian's python3, which has ipykernel, pandas and matplotlib
// (a pyenv one on PATH may have none of them).
const python = "/usr/bin/python3"

// Server is one code interpreter behind a routing front. It is shared by
// every sandbox made with DataPlane, as one sandbox's interpreter would be.
type Server struct {
	// URL is the front: the data plane's base URL.
	URL string
	// Dir is the interpreter's default working directory.
	Dir string

	interp *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]*sdk.DataPlane
	code      map[string]bool // whether sandbox id has the interpreter
}

// Start starts the interpreter and its front; both end with the test.
func Start(t testing.TB) *Server {
	t.Helper()
	if err := exec.Command(python, "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		testutil.Skip(t, "needs Debian's python3-ipykernel and python3-jupyter-client (scripts/setup.sh installs them)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		testutil.Skip(t, "needs node for the interpreter's JavaScript contexts")
	}
	dir := t.TempDir()
	srv, err := interpreter.New(interpreter.Config{AccessToken: Token, Dir: dir, Python: python, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Dir: dir, interp: httptest.NewServer(srv), sandboxes: map[string]*sdk.DataPlane{}, code: map[string]bool{}}
	target, _ := url.Parse(s.interp.URL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("E2b-Sandbox-Id")
			r.Out.Header.Del("E2b-Sandbox-Port")
		},
		FlushInterval: -1, // NDJSON lines go out as they come
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, port := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
		s.mu.Lock()
		_, known := s.sandboxes[id]
		code := s.code[id]
		s.mu.Unlock()
		switch {
		case !known:
			http.Error(w, "sandbox "+id+" is not running: it is unknown, was killed or timed out", http.StatusBadGateway)
		case port != strconv.Itoa(interpreter.Port) || !code:
			http.Error(w, "sandbox "+id+": nothing listens on port "+port+" inside the sandbox", http.StatusBadGateway)
		default:
			// The body is read whole first, as the daemon's proxy reads it
			// full duplex: else the interpreter's answer, which starts before
			// it has read the body to its end, makes net/http close the
			// body under the proxy's upstream write, and that cuts the
			// answer short.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			proxy.ServeHTTP(w, r)
		}
	}))
	s.URL = front.URL
	t.Cleanup(func() {
		front.Close()
		s.interp.Close()
		srv.Close()
	})
	return s
}

// DataPlane makes sandbox id known, with the interpreter, and returns its
// data plane: the front, routed by headers as `tupper serve`'s is.
func (s *Server) DataPlane(id string) *sdk.DataPlane {
	return s.add(id, true)
}

// BareDataPlane makes sandbox id known without an interpreter, as a
// sandbox of another template, and returns its data plane.
func (s *Server) BareDataPlane(id string) *sdk.DataPlane {
	return s.add(id, false)
}

func (s *Server) add(id string, code bool) *sdk.DataPlane {
	return s.register(id, code, &sdk.DataPlane{
		BaseURL:     s.URL,
		Header:      http.Header{"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {"49983"}},
		AccessToken: Token,
	})
}

func (s *Server) register(id string, code bool, dp *sdk.DataPlane) *sdk.DataPlane {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[id], s.code[id] = dp, code
	return dp
}

// DirectDataPlane makes sandbox id known, with the interpreter, and
// returns a data plane that reaches it by address, as the in-process
// engine's does: the agent's URL names port 49983 of a host that only its
// client's dialer knows, which connects port 49999 to the interpreter and
// refuses every other.
func (s *Server) DirectDataPlane(id string) *sdk.DataPlane {
	interpAddr := s.interp.Listener.Addr().String()
	dialer := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if _, port, _ := net.SplitHostPort(addr); port == strconv.Itoa(interpreter.Port) {
			return dialer.DialContext(ctx, network, interpAddr)
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}}
	return s.register(id, true, &sdk.DataPlane{
		BaseURL:     "http://" + id + ".codetest.invalid:49983",
		Client:      &http.Client{Transport: tr},
		AccessToken: Token,
	})
}

// Transport returns an sdk.Transport of the sandboxes made known so far and
// later: connecting to one and its data plane work; an unknown id is not
// found; creating, listing and killing are not supported.
func (s *Server) Transport() sdk.Transport { return transport{s} }

type transport struct{ s *Server }

func (t transport) info(id string) (*sdk.SandboxInfo, error) {
	t.s.mu.Lock()
	_, ok := t.s.sandboxes[id]
	t.s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return &sdk.SandboxInfo{SandboxID: id, TemplateID: "code-interpreter", State: "running", EnvdAccessToken: Token}, nil
}

func (t transport) CreateSandbox(context.Context, sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	return nil, fmt.Errorf("create sandbox: %w", errdefs.ErrNotSupported)
}

func (t transport) ConnectSandbox(_ context.Context, id string, _ time.Duration) (*sdk.SandboxInfo, error) {
	return t.info(id)
}

func (t transport) ListSandboxes(context.Context, sdk.ListQuery) (*sdk.ListPage, error) {
	return nil, fmt.Errorf("list sandboxes: %w", errdefs.ErrNotSupported)
}

func (t transport) GetSandbox(_ context.Context, id string) (*sdk.SandboxInfo, error) {
	return t.info(id)
}

func (t transport) SetTimeout(context.Context, string, time.Duration) error {
	return fmt.Errorf("set timeout: %w", errdefs.ErrNotSupported)
}

func (t transport) KillSandbox(context.Context, string) error {
	return fmt.Errorf("kill sandbox: %w", errdefs.ErrNotSupported)
}

func (t transport) DataPlane(_ context.Context, id string) (*sdk.DataPlane, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	dp, ok := t.s.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return dp, nil
}
