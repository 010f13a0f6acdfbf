package sdk_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/server"
)

// remoteServer starts what `tupper serve` runs, on real runsc with the
// Debian test image as its default template, behind an httptest server on
// loopback. It returns the server's URL and an API key.
func remoteServer(t *testing.T) (url, key string) {
	t.Helper()
	testutil.RequiresRunsc(t)
	if testing.Short() {
		t.Skip("short mode: boots gVisor sandboxes")
	}
	storeRoot, imageName := testutil.TestImage(t)
	// runsc's socket paths under the state directory must stay short.
	root, err := os.MkdirTemp("", "tpr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	rt, err := local.Open(ctx, local.Config{
		Root: root, ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t),
		Engine: engine.Config{DefaultTemplate: imageName}, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Open(filepath.Join(root, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, _, err = keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Engine: rt.Engine(), Keys: keys, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		kctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := rt.Engine().KillAll(kctx); err != nil {
			t.Errorf("kill all: %v", err)
		}
		rt.Close()
		keys.Close()
	})
	return hs.URL, key
}

// TestRemote runs the SDK's whole surface over the network against a real
// server: the scenario the in-process tests run, through a zero Client
// configured by the environment.
func TestRemote(t *testing.T) {
	url, key := remoteServer(t)
	t.Setenv(sdk.EnvAPIURL, url)
	t.Setenv(sdk.EnvAPIKey, key)
	t.Setenv(sdk.EnvSandboxURL, "")
	var c sdk.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	odd := "a b&c=%41+"
	sb, err := c.Create(ctx, sdk.CreateOptions{
		Metadata: map[string]string{"suite": "remote", "n": "1", "odd": odd},
		Envs:     map[string]string{"GREETING": "hello"},
		Timeout:  5 * time.Minute,
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	other, err := c.Create(ctx, sdk.CreateOptions{Metadata: map[string]string{"suite": "remote", "n": "2"}, MemoryMB: 256, CPUs: 2})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if info, err := other.GetInfo(ctx); err != nil || info.MemoryMB != 256 || info.CPUCount != 2 {
		t.Errorf("GetInfo after a create with 256 MB and 2 CPUs = %+v, %v", info, err)
	}
	if sb.Info().EnvdAccessToken == "" || sb.Info().EnvdVersion == "" {
		t.Errorf("create answered %+v, want an access token and an envd version", sb.Info())
	}

	t.Run("run", func(t *testing.T) {
		res, err := sb.Commands.Run(ctx, `echo "$GREETING $(whoami) $PWD"`)
		if err != nil || res.Stdout != "hello user /home/user\n" {
			t.Errorf("Run = %+v, %v", res, err)
		}
		res, err = sb.Commands.Run(ctx, `echo "$GREETING $FOO $(whoami) $PWD"`,
			sdk.WithEnv(map[string]string{"FOO": "bar"}), sdk.WithCwd("/tmp"), sdk.WithUser("root"))
		if err != nil || res.Stdout != "hello bar root /tmp\n" {
			t.Errorf("Run with env, cwd and user = %+v, %v", res, err)
		}
		res, err = sb.Commands.Run(ctx, "echo oops >&2; exit 3")
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || exit.ExitCode != 3 || res.Stderr != "oops\n" {
			t.Errorf("Run(exit 3) = %+v, %v; want a *CommandExitError with code 3", res, err)
		}
	})

	t.Run("files", func(t *testing.T) {
		const dir = "/home/user/remote"
		if _, err := sb.Files.Write(ctx, dir+"/a.txt", []byte("alpha")); err != nil {
			t.Fatal(err)
		}
		if b, err := sb.Files.Read(ctx, dir+"/a.txt"); err != nil || string(b) != "alpha" {
			t.Errorf("Read = %q, %v", b, err)
		}
		if made, err := sb.Files.MakeDir(ctx, dir+"/sub"); err != nil || !made {
			t.Errorf("MakeDir = %v, %v", made, err)
		}
		if made, err := sb.Files.MakeDir(ctx, dir+"/sub"); err != nil || made {
			t.Errorf("MakeDir again = %v, %v; want false", made, err)
		}
		entries, err := sb.Files.List(ctx, dir, 1)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name+":"+string(e.Type))
		}
		slices.Sort(names)
		if d := cmp.Diff([]string{"a.txt:file", "sub:dir"}, names); d != "" {
			t.Errorf("List (-want +got):\n%s", d)
		}
		if e, err := sb.Files.Rename(ctx, dir+"/a.txt", dir+"/sub/b.txt"); err != nil || e.Path != dir+"/sub/b.txt" {
			t.Errorf("Rename = %+v, %v", e, err)
		}
		if ok, err := sb.Files.Exists(ctx, dir+"/a.txt"); err != nil || ok {
			t.Errorf("Exists(renamed away) = %v, %v", ok, err)
		}
		st, err := sb.Files.Stat(ctx, dir+"/sub/b.txt")
		if err != nil || st.Size != 5 || st.Owner != "user" || !st.Mode.IsRegular() {
			t.Errorf("Stat = %+v, %v", st, err)
		}
		if err := sb.Files.Remove(ctx, dir+"/sub"); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Files.Read(ctx, dir+"/sub/b.txt"); !sdk.IsNotFound(err) {
			t.Errorf("Read(removed) = %v, want not found", err)
		}
	})

	t.Run("signed URLs", func(t *testing.T) {
		up, _ := signedRoundTrip(t, sb, "/home/user/signed.txt", sdk.URLOptions{Expires: time.Minute}, "signed content")
		if !strings.HasPrefix(up, url+"/files?") {
			t.Errorf("upload URL %q is not on the server", up)
		}
	})

	t.Run("background", func(t *testing.T) {
		var out buffer
		h, err := sb.Commands.Start(ctx, "read line; echo got:$line; cat", sdk.WithStdin(true), sdk.WithTag("bg"),
			sdk.WithOnStdout(func(s string) { out.add([]byte(s)) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SendStdin(ctx, []byte("hi\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the echo", func() bool { return out.String() == "got:hi\n" })
		procs, err := sb.Commands.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool { return p.PID == h.PID() && p.Tag == "bg" }) {
			t.Errorf("List = %+v, want pid %d tagged bg", procs, h.PID())
		}
		again, err := sb.Commands.ConnectTag(ctx, "bg")
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Commands.SendStdin(ctx, h.PID(), []byte("more\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the output on the second stream", func() bool { return again.Stdout() == "more\n" })
		if err := h.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if res, err := h.Wait(ctx); !sdk.IsCommandExit(err) || res.ExitCode == 0 {
			t.Errorf("Wait after Kill = %+v, %v; want a *CommandExitError", res, err)
		}
		if _, err := again.Wait(ctx); !sdk.IsCommandExit(err) {
			t.Errorf("Wait of the connected handle = %v, want a *CommandExitError", err)
		}
	})

	t.Run("pty", func(t *testing.T) {
		var out buffer
		term, err := sb.PTY.Create(ctx, sdk.PTYOptions{Cols: 80, Rows: 24, OnData: out.add, Envs: map[string]string{"PS1": "$ "}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.PTY.Resize(ctx, term.PID(), 100, 30); err != nil {
			t.Fatal(err)
		}
		if err := sb.PTY.SendInput(ctx, term.PID(), []byte("echo pty-$((40+2)); stty size; exit\n")); err != nil {
			t.Fatal(err)
		}
		if res, err := term.Wait(ctx); err != nil || res.ExitCode != 0 {
			t.Errorf("Wait = %+v, %v", res, err)
		}
		if s := out.String(); !strings.Contains(s, "pty-42") || !strings.Contains(s, "30 100") {
			t.Errorf("terminal output %q lacks the echo and the new size", s)
		}
	})

	t.Run("watch", func(t *testing.T) {
		const dir = "/home/user/watched"
		if _, err := sb.Files.MakeDir(ctx, dir); err != nil {
			t.Fatal(err)
		}
		w, err := sb.Files.Watch(ctx, dir, sdk.WatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := sb.Files.Write(ctx, dir+"/new.txt", []byte("x")); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("the watch ended: %v", w.Err())
				}
				if ev.Type == sdk.EventCreate && ev.Name == "new.txt" {
					return
				}
			case <-timeout:
				t.Fatal("no create event for new.txt")
			}
		}
	})

	t.Run("info and timeout", func(t *testing.T) {
		if ok, err := sb.IsRunning(ctx); !ok || err != nil {
			t.Errorf("IsRunning = %v, %v", ok, err)
		}
		if err := sb.SetTimeout(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		info, err := sb.GetInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != "running" || info.Metadata["n"] != "1" || info.Metadata["odd"] != odd || time.Until(info.EndAt) < 50*time.Minute {
			t.Errorf("GetInfo = %+v, want running, metadata as created, ending in about an hour", info)
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, md := range []map[string]string{{"suite": "remote", "n": "2"}, {"odd": odd}} {
			got, _, err := c.List(ctx, sdk.ListOptions{Metadata: md})
			if err != nil {
				t.Fatal(err)
			}
			want := other.ID()
			if md["odd"] != "" {
				want = sb.ID()
			}
			if len(got) != 1 || got[0].SandboxID != want {
				t.Errorf("List(%v) = %+v, want only %s", md, got, want)
			}
		}
		var ids []string
		pager := c.NewPaginator(sdk.ListOptions{Metadata: map[string]string{"suite": "remote"}, States: []string{"running"}, Limit: 1})
		for pager.HasNext() {
			page, err := pager.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				ids = append(ids, p.SandboxID)
			}
		}
		slices.Sort(ids)
		want := []string{sb.ID(), other.ID()}
		slices.Sort(want)
		if d := cmp.Diff(want, ids); d != "" {
			t.Errorf("paged listing (-want +got):\n%s", d)
		}
	})

	t.Run("dies by timeout", func(t *testing.T) {
		if err := other.SetTimeout(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the sandbox to time out", func() bool {
			_, err := other.GetInfo(ctx)
			return errors.Is(err, errdefs.ErrNotFound)
		})
		if ok, err := other.IsRunning(ctx); ok || err != nil {
			t.Errorf("IsRunning after the timeout = %v, %v", ok, err)
		}
	})

	t.Run("connect and kill", func(t *testing.T) {
		again, err := c.Connect(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := again.Commands.Run(ctx, "echo again"); err != nil || res.Stdout != "again\n" {
			t.Errorf("Run after Connect = %+v, %v", res, err)
		}
		if err := sb.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Kill(ctx); !sdk.IsNotFound(err) {
			t.Errorf("second Kill = %v, want not found", err)
		}
		if _, err := c.Connect(ctx, sb.ID()); !sdk.IsNotFound(err) {
			t.Errorf("Connect(killed) = %v, want not found", err)
		}
	})

	t.Run("wrong key", func(t *testing.T) {
		tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: url, APIKey: "e2b_" + strings.Repeat("0", 40)})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := (&sdk.Client{Transport: tr}).List(ctx, sdk.ListOptions{}); !sdk.IsUnauthenticated(err) {
			t.Errorf("List with a wrong key = %v, want unauthenticated", err)
		}
	})
}
