package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestDashboardCommand runs `tupper dashboard` against the real server and
// engine (on the fake backend): it prints a link alone on standard output
// that signs in once, --open has xdg-open open a page, readable by the
// user alone, that leads to the link (never the link itself, which any
// user could read on xdg-open's command line), and a refused key says what
// to do.
func TestDashboardCommand(t *testing.T) {
	ctx := context.Background()
	_, api, _ := templateDaemon(t)
	dir := t.TempDir()

	// A stand-in for xdg-open that notes what it was asked to open.
	bin := t.TempDir()
	opened := filepath.Join(dir, "opened")
	script := "#!/bin/sh\nprintf '%s' \"$1\" > " + opened + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())

	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	if err := runDashboard(ctx, g, &dashboardOptions{api: api, open: true}); err != nil {
		t.Fatal(err)
	}
	link := strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(link, api.url+"/dashboard/#login=") || strings.Count(stdout.String(), "\n") != 1 {
		t.Fatalf("stdout %q, want the link alone", stdout.String())
	}
	if !strings.Contains(stderr.String(), "works once") {
		t.Errorf("stderr %q does not say the link works once", stderr.String())
	}
	var arg string
	testutil.WaitFor(t, 10*time.Second, "xdg-open to be run", func() bool {
		b, _ := os.ReadFile(opened)
		arg = string(b)
		return arg != ""
	})
	_, token, _ := strings.Cut(link, "#login=")
	if strings.Contains(arg, token) {
		t.Errorf("xdg-open was given %q: the link's token, on a command line every user can read", arg)
	}
	st, err := os.Stat(arg)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("xdg-open was given %q: %v, %v; want a file only its user can read", arg, st, err)
	}
	page, _ := os.ReadFile(arg)
	if !strings.Contains(string(page), `http-equiv="refresh" content="0;url=`+link+`"`) {
		t.Errorf("the page xdg-open opens does not lead to the link:\n%s", page)
	}

	// The link signs in, once.
	for i, want := range []int{http.StatusCreated, http.StatusUnauthorized} {
		resp, err := http.Post(api.url+"/dashboard/session", "application/json", strings.NewReader(`{"token":"`+token+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("use %d of the link: %s, want %d", i+1, resp.Status, want)
		}
	}

	stdout.Reset()
	err = runDashboard(ctx, g, &dashboardOptions{api: apiOptions{url: api.url, key: "e2b_" + strings.Repeat("0", 40)}})
	if err == nil || !strings.Contains(err.Error(), "refused the API key") || stdout.Len() != 0 {
		t.Errorf("with a wrong key: %v, printed %q", err, stdout.String())
	}
}

func TestReachableURL(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string
	}{
		{name: "loopback", addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3000}, want: "http://127.0.0.1:3000"},
		{name: "every IPv4 address", addr: &net.TCPAddr{IP: net.IPv4zero, Port: 3000}, want: "http://localhost:3000"},
		{name: "every IPv6 address", addr: &net.TCPAddr{IP: net.IPv6unspecified, Port: 3000}, want: "http://localhost:3000"},
		{name: "IPv6 loopback", addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 3000}, want: "http://[::1]:3000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reachableURL("http", tt.addr); got != tt.want {
				t.Errorf("reachableURL(%v) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}
