package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

// TestSocketOfDefaultRoot keeps package localsock's idea of the default
// root the same as package local's, which `tupper serve` uses.
func TestSocketOfDefaultRoot(t *testing.T) {
	if localsock.DefaultRoot != local.DefaultRoot && localsock.DefaultPath != "" {
		t.Errorf("localsock.DefaultRoot = %q, local.DefaultRoot = %q", localsock.DefaultRoot, local.DefaultRoot)
	}
}

// listenAt listens on a unix socket at path until the test ends.
func listenAt(t *testing.T, path string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); os.Remove(path) })
}

func TestAPITarget(t *testing.T) {
	testutil.RequiresRoot(t) // sockets go in /run
	root := t.TempDir()
	sock := localsock.Of(root)
	listenAt(t, sock, http.NotFoundHandler())
	withRoot := func(o apiOptions, r string) apiOptions { o.root = func() string { return r }; return o }
	tests := []struct {
		name string
		env  map[string]string
		opts apiOptions
		want sdk.HTTPConfig
	}{
		{name: "the root's socket", opts: withRoot(apiOptions{}, root), want: sdk.HTTPConfig{APIURL: "unix://" + sock}},
		{name: "the socket with a key", opts: withRoot(apiOptions{key: "kf"}, root), want: sdk.HTTPConfig{APIURL: "unix://" + sock, APIKey: "kf"}},
		{name: "$TUPPER_ROOT's socket", env: map[string]string{"TUPPER_ROOT": root}, want: sdk.HTTPConfig{APIURL: "unix://" + sock}},
		{name: "a root without a socket", opts: withRoot(apiOptions{}, t.TempDir()), want: sdk.HTTPConfig{APIURL: "http://127.0.0.1:3000"}},
		{
			name: "the environment wins",
			env:  map[string]string{sdk.EnvAPIURL: "http://t:1", sdk.EnvAPIKey: "kt"},
			opts: withRoot(apiOptions{}, root),
			want: sdk.HTTPConfig{APIURL: "http://t:1", APIKey: "kt"},
		},
		{name: "the flag wins", opts: withRoot(apiOptions{url: "http://f:1", key: "kf"}, root), want: sdk.HTTPConfig{APIURL: "http://f:1", APIKey: "kf"}},
		{name: "a unix URL flag", opts: apiOptions{url: "unix:///x/y.sock"}, want: sdk.HTTPConfig{APIURL: "unix:///x/y.sock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearAPIEnv(t)
			t.Setenv("TUPPER_ROOT", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if d := cmp.Diff(tt.want, tt.opts.target()); d != "" {
				t.Errorf("target (-want +got):\n%s", d)
			}
		})
	}
}

// TestSocketErrors checks what the client commands say when the local
// socket does not answer, or refuses them.
func TestSocketErrors(t *testing.T) {
	clearAPIEnv(t)
	ctx := context.Background()
	dir := t.TempDir()

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()

	refusing := filepath.Join(dir, "refusing.sock")
	listenAt(t, refusing, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"code":403,"message":"tupper serve's socket lets in root and the members of group tupper; uid 1000 is neither"}`)
	}))

	tests := []struct {
		name string
		url  string
		want string
	}{
		{name: "stale socket", url: "unix://" + stale, want: "cannot reach tupper serve's socket " + stale + ": nothing listens on it; start it with `tupper serve`"},
		{name: "no socket", url: "unix://" + filepath.Join(dir, "none.sock"), want: "nothing listens on it"},
		{name: "refused peer", url: "unix://" + refusing, want: "uid 1000 is neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			g := &globals{stdout: &stdout, stderr: &stderr}
			err := runInfo(ctx, g, &infoOptions{api: apiOptions{url: tt.url}, id: "sb1"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("info: err = %v, want it to say %q", err, tt.want)
			}
		})
	}

	// Root may connect to any socket, so the kernel's refusal is made up.
	r := &remote{url: "unix:///run/tupper.sock", socket: "/run/tupper.sock"}
	eacces := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	want := "cannot reach tupper serve's socket /run/tupper.sock: permission denied; run as root or join the tupper group (or set TUPPER_API_URL and TUPPER_API_KEY)"
	if err := r.control(fmt.Errorf("list: %w", eacces), ""); err == nil || err.Error() != want {
		t.Errorf("a refused connect: %v, want %q", err, want)
	}
}

// TestRunFindsDaemon checks how `tupper run` picks between a daemon and an
// embedded engine: unlike `tupper mcp`, it does not ask the default address
// without a key, since a daemon there is not its root's.
func TestRunFindsDaemon(t *testing.T) {
	clearAPIEnv(t)
	ctx := context.Background()
	root := t.TempDir()
	if tr, err := findDaemon(ctx, root, "", "", false); err != nil || tr != nil {
		t.Errorf("no URL, key or socket: %v, %v; want the embedded engine", tr, err)
	}
	tr, err := findDaemon(ctx, root, "http://127.0.0.1:1", "e2b_x", false)
	if err != nil || tr == nil || tr.APIURL() != "http://127.0.0.1:1" {
		t.Errorf("a URL and a key: %v, %v; want the daemon there", tr, err)
	}
	if _, err := findDaemon(ctx, root, "http://127.0.0.1:1", "", false); err == nil || !strings.Contains(err.Error(), "needs an API key") {
		t.Errorf("a URL without a key: %v, want an error asking for one", err)
	}
	testutil.RequiresRoot(t) // the socket goes in /run
	sock := localsock.Of(root)
	listenAt(t, sock, http.NotFoundHandler())
	tr, err = findDaemon(ctx, root, "", "", false)
	if err != nil || tr == nil || tr.APIURL() != localsock.URL(sock) {
		t.Errorf("the root's socket: %v, %v; want the daemon there, with no key", tr, err)
	}
}
