package cli

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/internal/localsock"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestMCPDaemon checks how `tupper mcp` picks between a daemon and the
// embedded engine.
func TestMCPDaemon(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mcpOptions
		env  map[string]string
		// socket is the state of the root's local socket: "" (none),
		// "live" or "stale"; wantURL "socket" means its URL.
		socket  string
		wantURL string // "" means the embedded engine
		wantErr string
	}{
		{name: "local wins", opts: mcpOptions{local: true, url: "http://127.0.0.1:1"}, env: map[string]string{"TUPPER_API_KEY": "e2b_x"}},
		{name: "flag", opts: mcpOptions{url: "http://127.0.0.1:1"}, env: map[string]string{"TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:1"},
		{name: "environment", env: map[string]string{"TUPPER_API_URL": "http://127.0.0.1:2", "TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:2"},
		{name: "e2b environment", env: map[string]string{"E2B_API_URL": "http://127.0.0.1:3", "E2B_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:3"},
		{name: "no key", opts: mcpOptions{url: "http://127.0.0.1:1"}, wantErr: "TUPPER_API_KEY"},
		{name: "socket, no key needed", socket: "live", wantURL: "socket"},
		{name: "socket with a key", socket: "live", env: map[string]string{"TUPPER_API_KEY": "e2b_x"}, wantURL: "socket"},
		{name: "flag wins over the socket", socket: "live", opts: mcpOptions{url: "http://127.0.0.1:1"}, env: map[string]string{"TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:1"},
		{name: "environment wins over the socket", socket: "live", env: map[string]string{"TUPPER_API_URL": "http://127.0.0.1:2", "TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:2"},
		{name: "local wins over the socket", socket: "live", opts: mcpOptions{local: true}},
		{name: "stale socket", socket: "stale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"TUPPER_API_URL", "TUPPER_API_KEY", "TUPPER_SANDBOX_URL", "E2B_API_URL", "E2B_API_KEY", "E2B_SANDBOX_URL"} {
				t.Setenv(k, tc.env[k])
			}
			root := t.TempDir()
			if tc.socket != "" {
				testutil.RequiresRoot(t) // sockets go in /run
				path := localsock.Of(root)
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close(); os.Remove(path) })
				if tc.socket == "stale" {
					ln.SetUnlinkOnClose(false)
					ln.Close()
					if answers(context.Background(), defaultDaemonURL) {
						t.Skip("a daemon listens at " + defaultDaemonURL + ", which a stale socket falls back to")
					}
				}
				if tc.wantURL == "socket" {
					tc.wantURL = localsock.URL(path)
				}
			}
			tr, err := tc.opts.daemon(context.Background(), root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantURL == "" && tr != nil:
				t.Errorf("got the daemon at %s, want the embedded engine", tr.APIURL())
			case tc.wantURL != "" && (tr == nil || tr.APIURL() != tc.wantURL):
				t.Errorf("got %v, want the daemon at %s", tr, tc.wantURL)
			}
		})
	}
}
