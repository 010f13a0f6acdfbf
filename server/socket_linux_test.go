package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// TestListenSocket serves a real server on a real unix socket: root is let
// in with no key and acts in the default team, the socket is 0660, a stale
// one is replaced, a live one is not stolen, and the end of Serve removes
// it.
func TestListenSocket(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newTestEnv(t)
	path := filepath.Join(t.TempDir(), "t.sock")

	// A socket nothing listens on any more is stale.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	sock, err := ListenSocket(path, SocketOptions{Group: "tupper-test-no-such-group"})
	if err != nil {
		t.Fatalf("ListenSocket over a stale socket: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o660 || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %s: %v, %v; want a socket of mode 0660", path, st, err)
	}
	if _, err := ListenSocket(path, SocketOptions{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second ListenSocket on a live socket: %v, want ErrAlreadyExists", err)
	}

	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, tcp, e.server, ListenOptions{Socket: sock}) }()

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sb := e.create(`{"templateID":"base"}`)
	if code, body := get("http://tupper.localhost/sandboxes/" + sb.SandboxID); code != http.StatusOK || !strings.Contains(body, sb.SandboxID) {
		t.Errorf("root on the socket, no key: %d %s; want the default team's sandbox", code, body)
	}
	// Over TCP the same request still needs a key.
	resp, err := http.Get("http://" + tcp.Addr().String() + "/sandboxes/" + sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("TCP without a key: %s, want 401", resp.Status)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is left after Serve: %v", err)
	}
}

// TestListenSocketRefusesAFile keeps ListenSocket from deleting what is not
// a socket.
func TestListenSocketRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.sock")
	if err := os.WriteFile(path, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenSocket(path, SocketOptions{}); err == nil {
		t.Fatal("ListenSocket over a regular file succeeded")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "mine" {
		t.Errorf("the file was touched: %q, %v", b, err)
	}
}
