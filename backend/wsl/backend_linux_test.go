package wsl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/netpolicy"
)

// TestLifecycle starts, checks, reaches and stops a sandbox through the
// stand-in and holds each operation's wsl.exe calls to the letter: once as
// WSL 0.64 and later answer (UTF-8, as WSL_UTF8=1 asks), once as older
// releases do (UTF-16LE whatever WSL_UTF8 says). A second backend on the
// same root, as after a restart, finds the sandbox and stops it.
func TestLifecycle(t *testing.T) {
	requireRunc(t)
	if testing.Short() {
		t.Skip("short mode: starts sandboxes")
	}
	rootfs, agent := testutil.TestRootFS(t), testutil.AgentBinary(t)
	for _, enc := range []string{"utf-8", "utf-16le"} {
		t.Run(enc, func(t *testing.T) {
			s := newStandIn(t)
			if enc == "utf-16le" {
				t.Setenv("TUPPER_FAKEWSL_OLD", "1")
			}
			b := newTestBackend(t, Config{})
			id := "life" + strings.ReplaceAll(enc, "-", "")
			distro := "tupper-" + id
			spec := specFor(id, rootfs, agent)
			spec.Resources = backend.Resources{Pids: 300, DiskBytes: 256 << 20}
			ctx := context.Background()

			sb, err := b.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			var img imageInfo
			infoJSON, _ := os.ReadFile(filepath.Join(b.imagesDir(), imageKey(spec)+".json"))
			if err := json.Unmarshal(infoJSON, &img); err != nil {
				t.Fatal(err)
			}
			port := b.lookup(id).rec.Ports[backend.AgentPort]
			want := [][]string{
				{"--list", "--all", "--quiet"},
				{"--import", distro, filepath.Join(b.sandboxDir(id), "distro"), "-", "--version", "2"},
				{"--manage", distro, "--resize", fmt.Sprintf("%dMB", (distroDiskBytes(img, 256<<20)+1<<20-1)>>20)},
				{"-d", distro, "-u", "root", "--cd", "/", "--exec", "/bin/sh", "/.tupper/wsl/start", "300", "/usr/bin/env", "-i",
					"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
					"/.tupper/wsl/tupper-agent", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--inside-conns", "0", "--access-token-fd", "0"},
			}
			if diff := cmp.Diff(want, s.argvs(t)); diff != "" {
				t.Errorf("Start's wsl calls (-want +got):\n%s", diff)
			}
			if sb.AgentAddr != fmt.Sprintf("127.0.0.1:%d", port) || sb.ID != id || sb.Pid == 0 {
				t.Errorf("Start = %+v", sb)
			}

			// The agent holds the token it read from stdin, and its
			// environment is the spec's, not WSL's nor the token.
			envs := agentGet(t, sb.AgentAddr, "/envs", "tok-"+id)
			if diff := cmp.Diff(`{"LANG":"C.UTF-8","PATH":"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}`, strings.TrimSpace(envs)); diff != "" {
				t.Errorf("the agent's environment (-want +got):\n%s", diff)
			}
			if code := agentStatus(t, sb.AgentAddr, "/envs", "wrong"); code != http.StatusUnauthorized {
				t.Errorf("/envs with a wrong token: %d, want 401", code)
			}
			// The distribution has the backend's wsl.conf, not the image's.
			if conf := agentGet(t, sb.AgentAddr, "/files?username=root&path=/etc/wsl.conf", "tok-"+id); conf != wslConf(id) {
				t.Errorf("/etc/wsl.conf in the sandbox:\n%s\nwant the backend's", conf)
			}

			s.resetLog(t)
			if st, err := b.State(ctx, id); err != nil || st != backend.StateRunning {
				t.Errorf("State = %q, %v; want running", st, err)
			}
			if diff := cmp.Diff([][]string{{"--list", "--verbose"}}, s.argvs(t)); diff != "" {
				t.Errorf("State's wsl calls (-want +got):\n%s", diff)
			}
			if _, err := b.Start(ctx, spec); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a second Start: %v, want errdefs.ErrAlreadyExists", err)
			}
			s.resetLog(t)
			if ids, err := b.List(ctx); err != nil || !cmp.Equal(ids, []string{id}) {
				t.Errorf("List = %q, %v; want [%s] (and not the user's Ubuntu-24.04)", ids, err, id)
			}
			if diff := cmp.Diff([][]string{{"--list", "--all", "--quiet"}}, s.argvs(t)); diff != "" {
				t.Errorf("List's wsl calls (-want +got):\n%s", diff)
			}
			dialHealth(t, b, id)

			// After a restart: a new backend on the same root.
			b2 := newTestBackend(t, Config{Root: b.cfg.Root})
			if st, err := b2.State(ctx, id); err != nil || st != backend.StateRunning {
				t.Errorf("State after a restart = %q, %v; want running", st, err)
			}
			dialHealth(t, b2, id)
			s.resetLog(t)
			if err := b2.Stop(ctx, id); err != nil {
				t.Fatal(err)
			}
			want = [][]string{{"--list", "--all", "--quiet"}, {"--terminate", distro}, {"--unregister", distro}}
			if diff := cmp.Diff(want, s.argvs(t)); diff != "" {
				t.Errorf("Stop's wsl calls (-want +got):\n%s", diff)
			}
			// The first backend's wsl.exe ended with the distribution.
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := b.Wait(wctx, id); err != nil {
				t.Errorf("Wait on the first backend: %v", err)
			}
			b.forget(id)
			s.assertClean(t, b2, id, []int{port})
			if err := b2.Stop(ctx, id); err != nil {
				t.Errorf("a second Stop: %v", err)
			}
		})
	}
}

func agentStatus(t *testing.T, addr, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func agentGet(t *testing.T, addr, path, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// dialHealth asks the agent for /health through DialSandbox, as the
// engine reaches sandboxes.
func dialHealth(t *testing.T, b *Backend, id string) {
	t.Helper()
	c, err := b.DialSandbox(context.Background(), id, backend.AgentPort)
	if err != nil {
		t.Fatalf("DialSandbox: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /health HTTP/1.0\r\n\r\n")
	line, _ := io.ReadAll(io.LimitReader(c, 12))
	if string(line) != "HTTP/1.0 204" && string(line) != "HTTP/1.1 204" {
		t.Errorf("GET /health through DialSandbox: %q", line)
	}
}

// TestStartFailureCleanup fails Start at each of its steps and checks that
// nothing is left behind: no directory, record, distribution, runc
// sandbox, process or port.
func TestStartFailureCleanup(t *testing.T) {
	tests := []struct {
		name      string
		fail      string
		noAgent   bool
		needsRunc bool
		want      error
		wantCalls []string // the first word of each wsl call, in order
	}{
		{name: "the agent binary is missing", noAgent: true, wantCalls: []string{"--list"}},
		{name: "import fails", fail: "import", wantCalls: []string{"--list", "--import", "--list"}},
		{name: "resize fails, then the agent's wsl exits at once", fail: "resize,exec", want: errdefs.ErrUnavailable,
			wantCalls: []string{"--list", "--import", "--manage", "-d", "--list", "--terminate", "--unregister"}},
		{name: "the agent's wsl exits at once", fail: "exec", want: errdefs.ErrUnavailable,
			wantCalls: []string{"--list", "--import", "--manage", "-d", "--list", "--terminate", "--unregister"}},
		{name: "the agent never answers", fail: "silent", needsRunc: true, want: errdefs.ErrDeadlineExceeded,
			wantCalls: []string{"--list", "--import", "--manage", "-d", "--list", "--terminate", "--unregister"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needsRunc {
				requireRunc(t)
			}
			s := newStandIn(t)
			t.Setenv("TUPPER_FAKEWSL_FAIL", tt.fail)
			b := newTestBackend(t, Config{ReadyTimeout: 3 * time.Second})
			rootfs, agent := tinyRootFS(t), fakeAgent(t)
			if tt.needsRunc {
				rootfs, agent = testutil.TestRootFS(t), testutil.AgentBinary(t)
			}
			if tt.noAgent {
				agent = filepath.Join(t.TempDir(), "missing")
			}
			spec := specFor("fails", rootfs, agent)
			spec.Resources.DiskBytes = 64 << 20
			_, err := b.Start(context.Background(), spec)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Start: %v, want %v", err, tt.want)
			}
			t.Logf("Start: %v", err)
			argvs := s.argvs(t)
			var calls []string
			for _, a := range argvs {
				calls = append(calls, a[0])
			}
			if diff := cmp.Diff(tt.wantCalls, calls); diff != "" {
				t.Errorf("wsl calls (-want +got):\n%s", diff)
			}
			waitGone(t, "tupper-fails")
			s.assertClean(t, b, "fails", hostPorts(argvs))
		})
	}
}

// tinyRootFS is a root with the little the steps before the agent need.
func tinyRootFS(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("tiny\n"), 0o644)
	return root
}

// fakeAgent is a file that stands for the agent where none runs.
func fakeAgent(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tupper-agent")
	os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755)
	return p
}

// TestLeftovers checks List and Stop on what a crash leaves: a
// distribution with the backend's prefix and no directory, a directory
// with no distribution; the user's own distribution is never touched.
func TestLeftovers(t *testing.T) {
	s := newStandIn(t)
	b := newTestBackend(t, Config{})
	ctx := context.Background()
	tarPath := filepath.Join(t.TempDir(), "root.tar")
	if _, _, err := imageTar(filepath.Dir(tarPath), &backend.Spec{RootFS: tinyRootFS(t)}); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(tarPath), "*.tar"))
	added, _ := distroEntries("x", fakeAgent(t))
	body, _ := os.ReadFile(matches[0])
	s.run(t, append(body, added...), "--import", "tupper-orphan", t.TempDir(), "-", "--version", "2")
	os.MkdirAll(b.sandboxDir("halfmade"), 0o700)

	ids, err := b.List(ctx)
	if err != nil || !cmp.Equal(ids, []string{"halfmade", "orphan"}) {
		t.Fatalf("List = %q, %v; want [halfmade orphan]", ids, err)
	}
	if st, err := b.State(ctx, "halfmade"); err != nil || st != backend.StateStopped {
		t.Errorf("State of a half-made sandbox = %q, %v; want stopped", st, err)
	}
	if st, err := b.State(ctx, "nosuch"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State of an unknown id = %q, %v; want errdefs.ErrNotFound", st, err)
	}
	for _, id := range ids {
		if err := b.Stop(ctx, id); err != nil {
			t.Errorf("Stop(%s): %v", id, err)
		}
		if err := b.Stop(ctx, id); err != nil {
			t.Errorf("a second Stop(%s): %v", id, err)
		}
	}
	if err := b.Stop(ctx, "nosuch"); err != nil {
		t.Errorf("Stop of an unknown id: %v", err)
	}
	s.assertClean(t, b, "orphan", nil)
	if out := s.run(t, nil, "--list", "--all", "--quiet"); strings.TrimSpace(out) != "Ubuntu-24.04" {
		t.Errorf("after Stop, fakewsl lists %q; want only the user's distribution", out)
	}
}

// TestRefusesEgressPolicy checks that a sandbox whose egress must be
// limited is refused before anything is made: WSL cannot hold it.
func TestRefusesEgressPolicy(t *testing.T) {
	s := newStandIn(t)
	b := newTestBackend(t, Config{})
	spec := specFor("limited", tinyRootFS(t), fakeAgent(t))
	spec.Network = &netpolicy.Policy{DenyOut: []string{netpolicy.AllTrafficV4}}
	if _, err := b.Start(context.Background(), spec); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("Start with a deny-all policy: %v, want errdefs.ErrNotSupported", err)
	}
	if calls := s.argvs(t); len(calls) > 0 {
		t.Errorf("wsl ran: %q", calls)
	}
	s.assertClean(t, b, "limited", nil)
}

// TestCheck runs the self-check against the stand-in as one WSL release
// or another answers.
func TestCheck(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantVersion bool
		detail      string
	}{
		{"a current release", nil, true, "WSL 2.6.1.0, kernel 6.6.87.2-1, Windows 10.0.26100.4652"},
		{"a current release, UTF-16", map[string]string{"TUPPER_FAKEWSL_OLD": "1"}, true, "WSL 2.6.1.0, kernel 6.6.87.2-1, Windows 10.0.26100.4652"},
		{"a 1.x release", map[string]string{"TUPPER_FAKEWSL_WSL_VERSION": "1.2.5.0"}, false, "WSL 1.2.5.0"},
		{"the inbox wsl.exe", map[string]string{"TUPPER_FAKEWSL_INBOX": "1"}, false, "--version` failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newStandIn(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			findings := map[string]backend.Finding{}
			for _, f := range check(context.Background()) {
				findings[f.What] = f
			}
			if f := findings["wsl.exe"]; !f.OK {
				t.Errorf("wsl.exe: %+v", f)
			}
			v := findings["WSL version"]
			if v.OK != tt.wantVersion || !strings.Contains(v.Detail, tt.detail) || !v.OK && !strings.Contains(v.Fix, "wsl --update") {
				t.Errorf("WSL version: %+v; want OK %v, detail with %q", v, tt.wantVersion, tt.detail)
			}
			if d := findings["WSL default version"]; !d.OK || d.Detail != "2" {
				t.Errorf("WSL default version: %+v", d)
			}
			for _, what := range []string{"isolation", "network", "limits"} {
				if f, ok := findings[what]; !ok || f.OK || !f.Optional || f.Detail == "" {
					t.Errorf("%s: %+v; want a caveat that does not stop the backend", what, f)
				}
			}
			if !strings.Contains(findings["isolation"].Detail, "one VM on one Linux kernel") {
				t.Errorf("the isolation finding does not say that sandboxes share a kernel: %q", findings["isolation"].Detail)
			}
		})
	}
	t.Run("no wsl.exe", func(t *testing.T) {
		t.Setenv(WSLEnv, "")
		t.Setenv("PATH", t.TempDir())
		t.Setenv("SystemRoot", "")
		fs := check(context.Background())
		if len(fs) != 1 || fs[0].OK || fs[0].Fix == "" {
			t.Errorf("findings = %+v; want one failed wsl.exe with a fix", fs)
		}
	})
}

// TestStartFromStoreImage boots a sandbox from an image as the engine
// hands it over from a Windows host's store, which keeps images as their
// layers only: Spec.Image and no RootFS.
func TestStartFromStoreImage(t *testing.T) {
	requireRunc(t)
	if testing.Short() {
		t.Skip("short mode: starts a sandbox")
	}
	storeRoot, name := testutil.TestImage(t)
	st, err := image.Open(image.Config{Root: storeRoot})
	if err != nil {
		t.Fatal(err)
	}
	img, err := st.Resolve(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	newStandIn(t)
	b := newTestBackend(t, Config{})
	spec := specFor("fromstore", "", testutil.AgentBinary(t))
	spec.Image = engine.BackendImage(img)
	sb, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if envs := agentGet(t, sb.AgentAddr, "/envs", "tok-fromstore"); !strings.Contains(envs, "LANG") {
		t.Errorf("the agent of a sandbox from layers answered %q", envs)
	}
	if err := b.Stop(context.Background(), spec.ID); err != nil {
		t.Fatal(err)
	}
}
