//go:build linux

package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend"
	_ "github.com/lightbearco/tupper/backend/gvisor" // registers "gvisor"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
)

// newGVisorEnv builds the stack `tupper serve` runs, the way local.Open
// does, on real runsc with the Debian test image as template "base".
func newGVisorEnv(t *testing.T) (*testEnv, string) {
	t.Helper()
	testutil.RequiresRunsc(t)
	if testing.Short() {
		t.Skip("short mode: boots gVisor sandboxes")
	}
	storeRoot, imageName := testutil.TestImage(t)
	agentPath := testutil.AgentBinary(t)
	ctx := context.Background()
	// runsc's socket paths under the state directory must stay short.
	root, err := os.MkdirTemp("", "tps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	images, err := image.Open(image.Config{Root: storeRoot})
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.Open("gvisor", backend.Config{Root: filepath.Join(root, "backends", "gvisor"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(root, "engine"), Backend: be, BackendName: "gvisor", Images: images,
		AgentPath: agentPath, DefaultTemplate: imageName, Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Open(filepath.Join(root, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, Keys: keys, Domain: "tupper.test", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		kctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := eng.KillAll(kctx); err != nil {
			t.Errorf("kill all: %v", err)
		}
		eng.Close()
		keys.Close()
		images.Close()
	})
	return &testEnv{t: t, engine: eng, server: srv, http: hs, key: key}, imageName
}

// startStream runs cmd through Process.Start over the data plane and
// returns the events' JSON up to the end of the stream.
func (e *testEnv) startStream(sb sandboxJSON, cmd string, hdr http.Header) []map[string]any {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmd}}})
	resp := e.data(sb, "POST", "/process.Process/Start", "application/connect+json", envelope(0, body), hdr)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("Start %q: %d %s", cmd, resp.StatusCode, readAll(e.t, resp))
	}
	var events []map[string]any
	for {
		flags, msg, err := readEnvelope(resp.Body)
		if err != nil {
			e.t.Fatalf("Start %q: read after %v: %v", cmd, events, err)
		}
		if flags&0x02 != 0 {
			if s := strings.TrimSpace(string(msg)); s != "{}" {
				e.t.Fatalf("Start %q ended with %s", cmd, s)
			}
			return events
		}
		var ev struct {
			Event map[string]any `json:"event"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			e.t.Fatalf("event %s: %v", msg, err)
		}
		events = append(events, ev.Event)
	}
}

// stdout joins the stdout of a command's events.
func stdout(t *testing.T, events []map[string]any) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range events {
		if d, ok := ev["data"].(map[string]any); ok {
			if s, ok := d["stdout"].(string); ok {
				var raw []byte
				if err := json.Unmarshal([]byte(`"`+s+`"`), &raw); err != nil {
					t.Fatalf("stdout %q is not base64: %v", s, err)
				}
				b.Write(raw)
			}
		}
	}
	return b.String()
}

func TestGVisorEndToEnd(t *testing.T) {
	e, imageName := newGVisorEnv(t)
	start := time.Now()
	sb := e.create(fmt.Sprintf(`{"templateID":%q,"timeout":300,"metadata":{"suite":"gvisor"},"envVars":{"GREETING":"hello"}}`, imageName))
	t.Logf("create through the API took %v", time.Since(start).Round(time.Millisecond))
	other := e.create(`{}`)

	t.Run("health", func(t *testing.T) {
		if resp := e.data(sb, "GET", "/health", "", nil, nil); resp.StatusCode != http.StatusNoContent {
			t.Errorf("/health: %d", resp.StatusCode)
		}
	})

	t.Run("process stream", func(t *testing.T) {
		events := e.startStream(sb, `echo hi; echo "$GREETING from $(whoami)"`, http.Header{"Keepalive-Ping-Interval": {"50"}})
		if len(events) < 3 || events[0]["start"] == nil || events[len(events)-1]["end"] == nil {
			t.Fatalf("events %v: want start, data…, end", events)
		}
		if got := stdout(t, events); got != "hi\nhello from user\n" {
			t.Errorf("stdout %q", got)
		}
		end := events[len(events)-1]["end"].(map[string]any)
		if end["exited"] != true || end["status"] != "exit status 0" {
			t.Errorf("end event %v", end)
		}
	})

	t.Run("unary", func(t *testing.T) {
		resp := e.data(sb, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/home/user"}`), nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"FILE_TYPE_DIRECTORY"`) {
			t.Errorf("Stat /home/user: %d %s", resp.StatusCode, body)
		}
		resp = e.data(sb, "POST", "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"/nope"}`), nil)
		if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
			t.Errorf("Stat /nope: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("signed files", func(t *testing.T) {
		content := make([]byte, 3<<20)
		rand.Read(content)
		up := e.signedURL(sb, "write", "/home/user/blob.bin", "user", time.Now().Add(time.Minute).Unix())
		resp, err := http.Post(up, "application/octet-stream", bytes.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "/home/user/blob.bin") {
			t.Fatalf("signed upload: %d %s", resp.StatusCode, body)
		}
		resp, err = http.Get(e.signedURL(sb, "read", "/home/user/blob.bin", "user", 0))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || sha256.Sum256(got) != sha256.Sum256(content) {
			t.Errorf("signed download: %d, %d bytes", resp.StatusCode, len(got))
		}
		if out := stdout(t, e.startStream(sb, "stat -c %s:%U /home/user/blob.bin", nil)); out != fmt.Sprintf("%d:user\n", len(content)) {
			t.Errorf("inside the sandbox: %q", out)
		}
		// The other sandbox has no such file, and this signature opens
		// nothing there.
		resp = e.data(other, "GET", "/files?"+strings.SplitN(e.signedURL(sb, "read", "/home/user/blob.bin", "user", 0), "?", 2)[1], "", nil, http.Header{"X-Access-Token": nil})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("sandbox A's signature on sandbox B: %d", resp.StatusCode)
		}
	})

	t.Run("token isolation", func(t *testing.T) {
		resp := e.data(sb, "POST", "/process.Process/List", "application/json", []byte(`{}`), http.Header{"X-Access-Token": {other.EnvdAccessToken}})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("List with another sandbox's token: %d %s", resp.StatusCode, readAll(t, resp))
		}
		if resp := e.data(sb, "POST", "/init", "application/json", []byte(`{}`), nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("/init: %d", resp.StatusCode)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		status, _, body := e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", "")
		var ms []metricJSON
		if err := json.Unmarshal(body, &ms); status != http.StatusOK || err != nil || len(ms) != 1 {
			t.Fatalf("metrics: %d %s", status, body)
		}
		if m := ms[0]; m.CPUCount < 1 || m.MemTotal == 0 || m.DiskTotal == 0 {
			t.Errorf("metrics %+v", m)
		}
	})

	t.Run("getHost", func(t *testing.T) {
		// socketserver rather than http.server, whose bind looks up the
		// host's FQDN and waits for DNS the sandbox does not have.
		e.startStream(sb, `cd /tmp && echo served > index.html && (setsid python3 -c 'import socketserver, http.server as h
socketserver.TCPServer.allow_reuse_address = True
socketserver.TCPServer(("", 8000), h.SimpleHTTPRequestHandler).serve_forever()' >/dev/null 2>&1 &)`, nil)
		var status int
		var body string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			req, _ := http.NewRequest("GET", e.http.URL+"/index.html", nil)
			req.Host = "8000-" + sb.SandboxID + ".tupper.test"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
			if status == http.StatusOK {
				break
			}
		}
		if status != http.StatusOK || body != "served\n" {
			t.Errorf("a server in the sandbox through getHost: %d %q", status, body)
		}
	})

	t.Run("kill", func(t *testing.T) {
		if status, _, body := e.do("DELETE", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", status, body)
		}
		if status, _, _ := e.do("DELETE", "/sandboxes/"+sb.SandboxID, ""); status != http.StatusNotFound {
			t.Errorf("second kill: %d", status)
		}
		if resp := e.data(sb, "GET", "/health", "", nil, nil); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("/health after kill: %d", resp.StatusCode)
		}
	})
}
