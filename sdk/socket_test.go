package sdk_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// socketAPI is a fake `tupper serve` on a unix socket: it answers connect
// and a file read, and records what reached it.
type socketAPI struct {
	mu    sync.Mutex
	seen  []string // "METHOD PATH host=H key=K sandbox=S token=T"
	path  string
	close func()
}

func serveSocketAPI(t *testing.T, path string) *socketAPI {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	a := &socketAPI{path: path}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path+" host="+r.Host+" key="+r.Header.Get("X-Api-Key")+
			" sandbox="+r.Header.Get("E2b-Sandbox-Id")+" token="+r.Header.Get("X-Access-Token"))
		a.mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "POST /sandboxes/sb1/connect":
			writeJSON(w, http.StatusOK, map[string]any{"templateID": "base", "sandboxID": "sb1", "clientID": "c",
				"envdVersion": "0.5.7", "envdAccessToken": "tok1", "domain": "d"})
		case "GET /files":
			w.Write([]byte("over the socket"))
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "no " + r.URL.Path})
		}
	})}
	go srv.Serve(ln)
	a.close = func() { srv.Close() }
	t.Cleanup(a.close)
	return a
}

func (a *socketAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// readOverSocket connects to sb1 and reads a file through c, and checks
// that both planes went over the socket.
func readOverSocket(t *testing.T, c *sdk.Client, a *socketAPI) {
	t.Helper()
	ctx := context.Background()
	sb, err := c.Connect(ctx, "sb1")
	if err != nil {
		t.Fatalf("connect over the socket: %v", err)
	}
	got, err := sb.Files.Read(ctx, "/etc/hostname")
	if err != nil || string(got) != "over the socket" {
		t.Fatalf("read over the socket: %q, %v", got, err)
	}
	want := []string{
		"POST /sandboxes/sb1/connect host=tupper.localhost key= sandbox= token=",
		"GET /files host=tupper.localhost key= sandbox=sb1 token=tok1",
	}
	if got := a.requests(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the socket saw %q, want %q", got, want)
	}
}

func TestHTTPTransportOverSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.sock")
	a := serveSocketAPI(t, path)
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: "unix://" + path})
	if err != nil {
		t.Fatal(err)
	}
	if tr.APIURL() != "unix://"+path {
		t.Errorf("APIURL() = %q, want the unix URL it was given", tr.APIURL())
	}
	readOverSocket(t, &sdk.Client{Transport: tr}, a)

	// A client whose transport the socket cannot dial through is refused
	// at once, rather than sending requests elsewhere.
	odd := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("no") })}
	if _, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: "unix://" + path, HTTPClient: odd}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a unix URL with a custom RoundTripper: %v, want ErrInvalidArgument", err)
	}

	// Nothing listening: the error says so, as over TCP.
	a.close()
	_, err = (&sdk.Client{Transport: tr}).Connect(context.Background(), "sb1")
	if !sdk.IsUnavailable(err) {
		t.Errorf("connect to a closed socket: %v, want unavailable", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestZeroClientFindsTheSocket checks that with no URL in the environment a
// zero Client uses the socket of $TUPPER_ROOT's daemon when it exists.
func TestZeroClientFindsTheSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the local socket is Linux's")
	}
	testutil.RequiresRoot(t) // the socket goes in /run
	for _, k := range []string{sdk.EnvAPIURL, sdk.EnvAPIKey, sdk.EnvSandboxURL, sdk.EnvE2BAPIURL, sdk.EnvE2BAPIKey, sdk.EnvE2BSandboxURL} {
		t.Setenv(k, "")
	}
	root := t.TempDir()
	t.Setenv(localsock.EnvRoot, root)
	if _, err := sdk.NewHTTPTransport(sdk.HTTPConfigFromEnv()); !errors.Is(err, sdk.ErrNoEndpoint) {
		t.Fatalf("no socket yet: %v, want ErrNoEndpoint", err)
	}
	path := localsock.Of(root)
	a := serveSocketAPI(t, path)
	t.Cleanup(func() { os.Remove(path) })
	readOverSocket(t, &sdk.Client{}, a)
}
