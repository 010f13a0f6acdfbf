package sdk_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/agent"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// These tests run the real agent in this process, served by httptest, and
// drive it through the SDK as root on the host. The host has no `user`
// account, so the agent's default user is root and other users are picked
// with WithUser.

const agentToken = "test-access-token"

// agentTransport is a Transport for one in-process agent: the data plane is
// the test server, and control-plane calls are not supported.
type agentTransport struct {
	url string
}

func (a *agentTransport) CreateSandbox(context.Context, sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	return nil, fmt.Errorf("create sandbox: %w", errdefs.ErrNotSupported)
}

func (a *agentTransport) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*sdk.SandboxInfo, error) {
	return &sdk.SandboxInfo{SandboxID: id, State: "running", EnvdVersion: agent.Version, EnvdAccessToken: agentToken}, nil
}

func (a *agentTransport) ListSandboxes(context.Context, sdk.ListQuery) (*sdk.ListPage, error) {
	return nil, fmt.Errorf("list sandboxes: %w", errdefs.ErrNotSupported)
}

func (a *agentTransport) GetSandbox(context.Context, string) (*sdk.SandboxInfo, error) {
	return nil, fmt.Errorf("get sandbox: %w", errdefs.ErrNotSupported)
}

func (a *agentTransport) SetTimeout(context.Context, string, time.Duration) error {
	return fmt.Errorf("set timeout: %w", errdefs.ErrNotSupported)
}

func (a *agentTransport) KillSandbox(context.Context, string) error {
	return fmt.Errorf("kill sandbox: %w", errdefs.ErrNotSupported)
}

func (a *agentTransport) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	return &sdk.DataPlane{BaseURL: a.url, AccessToken: agentToken}, nil
}

var (
	agentOnce sync.Once
	agentURL  string
	agentErr  error
)

// localSandbox returns a Sandbox backed by the one in-process agent of this
// test binary (one, because the agent reaps every child of its process).
func localSandbox(t *testing.T) *sdk.Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the in-process agent switches users: run the tests as root")
	}
	agentOnce.Do(func() {
		h, err := agent.NewHandler(agent.Config{
			DefaultUser: "root",
			AccessToken: agentToken,
			Logger:      slog.New(slog.DiscardHandler),
		})
		if err != nil {
			agentErr = err
			return
		}
		// Never closed: the server lives as long as the test binary.
		agentURL = httptest.NewServer(h).URL
	})
	if agentErr != nil {
		t.Fatalf("agent: %v", agentErr)
	}
	c := &sdk.Client{Transport: &agentTransport{url: agentURL}}
	sb, err := c.Connect(context.Background(), "local")
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// buffer is a concurrency-safe byte sink for output callbacks.
type buffer struct {
	mu sync.Mutex
	b  []byte
}

func (b *buffer) add(p []byte) {
	b.mu.Lock()
	b.b = append(b.b, p...)
	b.mu.Unlock()
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

func TestAgentRun(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	dir := t.TempDir()

	tests := []struct {
		name       string
		cmd        string
		opts       []sdk.CommandOption
		wantStdout string
		wantStderr string
		wantExit   int
	}{
		{name: "echo", cmd: "echo hello", wantStdout: "hello\n"},
		{name: "stderr", cmd: "echo out; echo oops >&2", wantStdout: "out\n", wantStderr: "oops\n"},
		{name: "exit code", cmd: "echo partial; exit 3", wantStdout: "partial\n", wantExit: 3},
		{name: "false", cmd: "false", wantExit: 1},
		{name: "env", cmd: `printf '%s|%s' "$FOO" "$BAR"`, opts: []sdk.CommandOption{sdk.WithEnv(map[string]string{"FOO": "a b", "BAR": "ü"})}, wantStdout: "a b|ü"},
		{name: "cwd", cmd: "pwd", opts: []sdk.CommandOption{sdk.WithCwd(dir)}, wantStdout: dir + "\n"},
		{name: "default user", cmd: "id -un", wantStdout: "root\n"},
		{name: "root", cmd: "id -u", opts: []sdk.CommandOption{sdk.WithUser("root")}, wantStdout: "0\n"},
		{name: "other user", cmd: "id -un", opts: []sdk.CommandOption{sdk.WithUser("nobody")}, wantStdout: "nobody\n"},
		{name: "bash login shell", cmd: "shopt -q login_shell && echo login", wantStdout: "login\n"},
		{name: "stdin is closed by default", cmd: "cat; echo done", wantStdout: "done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sb.Commands.Run(ctx, tt.cmd, tt.opts...)
			if tt.wantExit == 0 && err != nil {
				t.Fatalf("Run(%q): %v", tt.cmd, err)
			}
			if tt.wantExit != 0 {
				var exit *sdk.CommandExitError
				if !errors.As(err, &exit) {
					t.Fatalf("Run(%q): err = %v, want a *CommandExitError", tt.cmd, err)
				}
				if res == nil || exit.CommandResult != *res {
					t.Errorf("the exit error's result %+v differs from the result %+v", exit.CommandResult, res)
				}
				if !sdk.IsCommandExit(err) {
					t.Error("IsCommandExit = false")
				}
			}
			want := sdk.CommandResult{Stdout: tt.wantStdout, Stderr: tt.wantStderr, ExitCode: tt.wantExit}
			if diff := cmp.Diff(want, *res, cmpResult); diff != "" {
				t.Errorf("Run(%q) (-want +got):\n%s", tt.cmd, diff)
			}
		})
	}

	t.Run("unknown user", func(t *testing.T) {
		_, err := sb.Commands.Run(ctx, "true", sdk.WithUser("no-such-user"))
		if !sdk.IsUnauthenticated(err) {
			t.Errorf("err = %v, want class unauthenticated", err)
		}
	})
	t.Run("missing cwd", func(t *testing.T) {
		_, err := sb.Commands.Run(ctx, "true", sdk.WithCwd(filepath.Join(dir, "nope")))
		if err == nil {
			t.Error("Run in a missing directory succeeded")
		}
	})
}

// cmpResult ignores the agent's wording of how a process ended.
var cmpResult = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Error" }, cmp.Ignore())

func TestAgentStreaming(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)

	var (
		mu     sync.Mutex
		chunks []string
		first  time.Time
		errs   strings.Builder
	)
	start := time.Now()
	res, err := sb.Commands.Run(ctx, "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo warn >&2",
		sdk.WithOnStdout(func(s string) {
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() {
				first = time.Now()
			}
			chunks = append(chunks, s)
		}),
		sdk.WithOnStderr(func(s string) { errs.WriteString(s) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	if got := strings.Join(chunks, ""); got != res.Stdout || got != "line1\nline2\nline3\nline4\nline5\n" {
		t.Errorf("callbacks got %q, result %q", got, res.Stdout)
	}
	if errs.String() != "warn\n" {
		t.Errorf("stderr callback got %q", errs.String())
	}
	if len(chunks) < 2 || end.Sub(first) < 250*time.Millisecond {
		t.Errorf("output was not streamed: %d chunks, first at %v of %v", len(chunks), first.Sub(start), end.Sub(start))
	}
}

func TestAgentLargeOutput(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	file := filepath.Join(t.TempDir(), "out.bin")
	const size = 10 << 20
	var streamed buffer
	res, err := sb.Commands.Run(ctx, fmt.Sprintf("head -c %d /dev/urandom | tee %s", size, file),
		sdk.WithOnStdout(func(s string) { streamed.add([]byte(s)) }))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != size || sha256.Sum256([]byte(res.Stdout)) != sha256.Sum256(want) {
		t.Errorf("stdout: %d bytes, not the %d bytes written", len(res.Stdout), size)
	}
	if streamed.String() != res.Stdout {
		t.Error("the streamed output differs from the result")
	}
}

func TestAgentBackground(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)

	t.Run("stdin", func(t *testing.T) {
		h, err := sb.Commands.Start(ctx, "read line; echo got:$line; cat", sdk.WithStdin(true))
		if err != nil {
			t.Fatal(err)
		}
		if h.PID() == 0 {
			t.Error("PID() = 0")
		}
		if err := h.SendStdin(ctx, []byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the echo", func() bool { return h.Stdout() == "got:hello\n" })
		if err := sb.Commands.SendStdin(ctx, h.PID(), []byte("rest")); err != nil {
			t.Fatal(err)
		}
		if err := h.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.Stdout != "got:hello\nrest" {
			t.Errorf("Wait = %+v, %v", res, err)
		}
	})

	t.Run("start outlives its context", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		h, err := sb.Commands.Start(sctx, "sleep 0.3; echo late")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.Stdout != "late\n" {
			t.Errorf("Wait = %+v, %v", res, err)
		}
	})

	t.Run("kill", func(t *testing.T) {
		h, err := sb.Commands.Start(ctx, "sleep 30")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(ctx)
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || res == nil || res.ExitCode == 0 {
			t.Errorf("Wait after Kill = %+v, %v; want a *CommandExitError", res, err)
		}
		if err := sb.Commands.Kill(ctx, h.PID()); !sdk.IsNotFound(err) {
			t.Errorf("Kill of an ended process: err = %v, want not found", err)
		}
	})

	t.Run("sigterm", func(t *testing.T) {
		var out buffer
		h, err := sb.Commands.Start(ctx, "trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.05; done",
			sdk.WithOnStdout(func(s string) { out.add([]byte(s)) }))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the trap", func() bool { return strings.Contains(out.String(), "ready") })
		if err := sb.Commands.Signal(ctx, h.PID(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(ctx)
		if !sdk.IsCommandExit(err) || res.ExitCode != 7 || !strings.Contains(res.Stdout, "term") {
			t.Errorf("Wait after SIGTERM = %+v, %v", res, err)
		}
		if err := sb.Commands.Signal(ctx, h.PID(), syscall.SIGHUP); !sdk.IsInvalidArgument(err) {
			t.Errorf("SIGHUP: err = %v, want invalid argument", err)
		}
	})

	t.Run("timeout kills the process", func(t *testing.T) {
		start := time.Now()
		_, err := sb.Commands.Run(ctx, "sleep 20; echo survived", sdk.WithTimeout(400*time.Millisecond))
		if !sdk.IsDeadlineExceeded(err) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Run took %v despite a 400ms timeout", d)
		}
		waitFor(t, 5*time.Second, "the process to be gone", func() bool {
			procs, err := sb.Commands.List(ctx)
			return err == nil && !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool {
				return slices.Contains(p.Args, "sleep 20; echo survived")
			})
		})
	})

	t.Run("run context ends", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := sb.Commands.Run(rctx, "sleep 21", sdk.WithTimeout(0))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the context's deadline", err)
		}
		waitFor(t, 5*time.Second, "Run to kill the process", func() bool {
			procs, err := sb.Commands.List(ctx)
			return err == nil && !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool {
				return slices.Contains(p.Args, "sleep 21")
			})
		})
	})

	t.Run("not found", func(t *testing.T) {
		const pid = 1 << 30
		if err := sb.Commands.Kill(ctx, pid); !sdk.IsNotFound(err) || !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Kill: err = %v", err)
		}
		if err := sb.Commands.SendStdin(ctx, pid, []byte("x")); !sdk.IsNotFound(err) {
			t.Errorf("SendStdin: err = %v", err)
		}
		if _, err := sb.Commands.Connect(ctx, pid); !sdk.IsNotFound(err) {
			t.Errorf("Connect: err = %v", err)
		}
		if _, err := sb.Commands.ConnectTag(ctx, "no-such-tag"); !sdk.IsNotFound(err) {
			t.Errorf("ConnectTag: err = %v", err)
		}
	})
}

func TestAgentReconnect(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	tag := fmt.Sprintf("job-%d", rand.Uint32())
	h, err := sb.Commands.Start(ctx, "echo first; read x; echo second:$x; read y; echo third:$y",
		sdk.WithStdin(true), sdk.WithTag(tag), sdk.WithEnv(map[string]string{"K": "v"}), sdk.WithTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	pid := h.PID()
	waitFor(t, 5*time.Second, "the first line", func() bool { return h.Stdout() == "first\n" })
	h.Disconnect()
	if _, err := h.Wait(ctx); !errors.Is(err, sdk.ErrDisconnected) {
		t.Errorf("Wait after Disconnect: err = %v, want ErrDisconnected", err)
	}

	procs, err := sb.Commands.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(procs, func(p sdk.ProcessInfo) bool { return p.PID == pid })
	if i < 0 {
		t.Fatalf("List has no process %d: %+v", pid, procs)
	}
	if p := procs[i]; p.Tag != tag || p.Cmd != "/bin/bash" || p.Envs["K"] != "v" || !slices.Equal(p.Args[:2], []string{"-l", "-c"}) {
		t.Errorf("process info = %+v", p)
	}

	// By pid.
	h2, err := sb.Commands.Connect(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if h2.PID() != pid {
		t.Errorf("Connect: PID() = %d, want %d", h2.PID(), pid)
	}
	if err := sb.Commands.SendStdin(ctx, pid, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the second line", func() bool { return strings.Contains(h2.Stdout(), "second:a\n") })
	h2.Disconnect()

	// By tag.
	var out buffer
	h3, err := sb.Commands.ConnectTag(ctx, tag, sdk.WithOnStdout(func(s string) { out.add([]byte(s)) }))
	if err != nil {
		t.Fatal(err)
	}
	if h3.PID() != pid {
		t.Errorf("ConnectTag: PID() = %d, want %d", h3.PID(), pid)
	}
	if err := h3.SendStdin(ctx, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	res, err := h3.Wait(ctx)
	if err != nil || !strings.Contains(res.Stdout, "third:b\n") || strings.Contains(res.Stdout, "first") {
		t.Errorf("Wait = %+v, %v; want the output after attaching", res, err)
	}
	if !strings.Contains(out.String(), "third:b") {
		t.Errorf("callback of the re-attached handle got %q", out.String())
	}
}

func TestAgentFiles(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	dir := t.TempDir()

	t.Run("round trip", func(t *testing.T) {
		p := filepath.Join(dir, "new", "sub", "hello.txt")
		info, err := sb.Files.Write(ctx, p, []byte("hello\n"))
		if err != nil {
			t.Fatal(err)
		}
		if info.Path != p || info.Name != "hello.txt" || info.Type != sdk.FileTypeFile {
			t.Errorf("WriteInfo = %+v", info)
		}
		got, err := sb.Files.Read(ctx, p)
		if err != nil || string(got) != "hello\n" {
			t.Errorf("Read = %q, %v", got, err)
		}
		if _, err := sb.Files.Write(ctx, p, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := sb.Files.Read(ctx, p); err != nil || len(got) != 0 {
			t.Errorf("Read of an emptied file = %q, %v", got, err)
		}
	})

	t.Run("stream 100 MiB", func(t *testing.T) {
		if testing.Short() {
			t.Skip("short mode")
		}
		const size = 100 << 20
		p := filepath.Join(dir, "big.bin")
		src := io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), size)
		sent := sha256.New()
		if _, err := sb.Files.WriteStream(ctx, p, io.TeeReader(src, sent)); err != nil {
			t.Fatal(err)
		}
		rc, err := sb.Files.ReadStream(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		got := sha256.New()
		n, err := io.Copy(got, rc)
		if err != nil {
			t.Fatal(err)
		}
		if n != size || string(got.Sum(nil)) != string(sent.Sum(nil)) {
			t.Errorf("read back %d bytes with sha256 %x, wrote %d with %x", n, got.Sum(nil), size, sent.Sum(nil))
		}
		os.Remove(p)
	})

	t.Run("write many", func(t *testing.T) {
		entries := []sdk.WriteEntry{
			{Path: filepath.Join(dir, "many", "a.txt"), Data: []byte("A")},
			{Path: filepath.Join(dir, "many", "with space", "ünï 🦫.txt"), Data: []byte("unicode")},
			{Path: filepath.Join(dir, "many", `q"uote.txt`), Reader: strings.NewReader("from a reader")},
		}
		infos, err := sb.Files.WriteMany(ctx, entries)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != len(entries) {
			t.Errorf("WriteMany returned %d infos for %d files: %+v", len(infos), len(entries), infos)
		}
		for i, e := range entries {
			want := string(e.Data)
			if i == 2 {
				want = "from a reader"
			}
			got, err := os.ReadFile(e.Path)
			if err != nil || string(got) != want {
				t.Errorf("%s holds %q, %v; want %q", e.Path, got, err, want)
			}
		}
	})

	t.Run("list stat exists", func(t *testing.T) {
		base := filepath.Join(dir, "tree")
		for _, p := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
			if _, err := sb.Files.Write(ctx, filepath.Join(base, p), []byte(p)); err != nil {
				t.Fatal(err)
			}
		}
		names := func(es []sdk.EntryInfo) []string {
			var out []string
			for _, e := range es {
				out = append(out, strings.TrimPrefix(e.Path, base+"/"))
			}
			slices.Sort(out)
			return out
		}
		es, err := sb.Files.List(ctx, base, 1)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a.txt", "d"}, names(es)); diff != "" {
			t.Errorf("List depth 1 (-want +got):\n%s", diff)
		}
		es, err = sb.Files.List(ctx, base, 2)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a.txt", "d", "d/b.txt", "d/e"}, names(es)); diff != "" {
			t.Errorf("List depth 2 (-want +got):\n%s", diff)
		}
		st, err := sb.Files.Stat(ctx, filepath.Join(base, "d/b.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Type != sdk.FileTypeFile || st.Size != int64(len("d/b.txt")) || st.Name != "b.txt" || st.Owner != "root" || st.ModifiedTime.IsZero() || !st.Mode.IsRegular() {
			t.Errorf("Stat = %+v", st)
		}
		st, err = sb.Files.GetInfo(ctx, filepath.Join(base, "d"))
		if err != nil || st.Type != sdk.FileTypeDir || !st.Mode.IsDir() {
			t.Errorf("GetInfo(dir) = %+v, %v", st, err)
		}
		if ok, err := sb.Files.Exists(ctx, filepath.Join(base, "a.txt")); !ok || err != nil {
			t.Errorf("Exists(a.txt) = %v, %v", ok, err)
		}
		if ok, err := sb.Files.Exists(ctx, filepath.Join(base, "zzz")); ok || err != nil {
			t.Errorf("Exists(zzz) = %v, %v", ok, err)
		}
	})

	t.Run("mkdir rename remove", func(t *testing.T) {
		p := filepath.Join(dir, "mk", "x", "y")
		created, err := sb.Files.MakeDir(ctx, p)
		if err != nil || !created {
			t.Fatalf("MakeDir = %v, %v", created, err)
		}
		created, err = sb.Files.MakeDir(ctx, p)
		if err != nil || created {
			t.Errorf("MakeDir of an existing directory = %v, %v; want false, nil", created, err)
		}
		if _, err := sb.Files.Write(ctx, filepath.Join(p, "f"), []byte("f")); err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, "mk", "moved")
		e, err := sb.Files.Rename(ctx, filepath.Join(dir, "mk", "x"), to)
		if err != nil {
			t.Fatal(err)
		}
		if e.Path != to || e.Type != sdk.FileTypeDir {
			t.Errorf("Rename = %+v", e)
		}
		if b, err := os.ReadFile(filepath.Join(to, "y", "f")); err != nil || string(b) != "f" {
			t.Errorf("moved file: %q, %v", b, err)
		}
		if err := sb.Files.Remove(ctx, to); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(to); !os.IsNotExist(err) {
			t.Errorf("after Remove: %v", err)
		}
	})

	t.Run("errors", func(t *testing.T) {
		missing := filepath.Join(dir, "missing")
		checks := map[string]error{
			"Read":       func() error { _, err := sb.Files.Read(ctx, missing); return err }(),
			"ReadStream": func() error { _, err := sb.Files.ReadStream(ctx, missing); return err }(),
			"Stat":       func() error { _, err := sb.Files.Stat(ctx, missing); return err }(),
			"List":       func() error { _, err := sb.Files.List(ctx, missing, 1); return err }(),
			"Remove":     sb.Files.Remove(ctx, missing),
			"Rename":     func() error { _, err := sb.Files.Rename(ctx, missing, missing+"2"); return err }(),
			"Watch":      func() error { _, err := sb.Files.Watch(ctx, missing, sdk.WatchOptions{}); return err }(),
		}
		for name, err := range checks {
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%s of a missing path: err = %v, want class not found", name, err)
			} else if !strings.Contains(err.Error(), "missing") {
				t.Errorf("%s: err %q does not name the path", name, err)
			}
		}
		if _, err := sb.Files.Read(ctx, dir); err == nil {
			t.Error("Read of a directory succeeded")
		}
	})

	t.Run("users", func(t *testing.T) {
		pub := testutil.SharedTempDir(t)
		p := filepath.Join(pub, "mine")
		if _, err := sb.Files.Write(ctx, p, []byte("x"), sdk.WithUser("nobody")); err != nil {
			t.Fatal(err)
		}
		st, err := sb.Files.Stat(ctx, p, sdk.WithUser("nobody"))
		if err != nil || st.Owner != "nobody" {
			t.Errorf("Stat = %+v, %v; want owner nobody", st, err)
		}
		// The agent runs as root, but a request as nobody has nobody's
		// permissions: root's private file is neither read nor replaced.
		secret := filepath.Join(pub, "root only")
		if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Files.Read(ctx, secret, sdk.WithUser("nobody")); !sdk.IsPermissionDenied(err) {
			t.Errorf("Read of root's 0600 file as nobody: err = %v, want permission denied", err)
		}
		if _, err := sb.Files.Write(ctx, filepath.Join(dir, "x"), []byte("x"), sdk.WithUser("nobody")); !sdk.IsPermissionDenied(err) {
			t.Errorf("Write into root's private directory as nobody: err = %v, want permission denied", err)
		}
	})

	t.Run("signed URLs", func(t *testing.T) {
		p := filepath.Join(dir, "signed file.txt")
		_, down := signedRoundTrip(t, sb, p, sdk.URLOptions{User: "root", Expires: time.Minute}, "via url")
		// A URL signed for reading does not write.
		resp, err := http.Post(down, "application/octet-stream", strings.NewReader("no"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST to a download URL: %s, want 401", resp.Status)
		}
	})
}

func TestAgentWatch(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	dir := t.TempDir()

	w, err := sb.Files.Watch(ctx, dir, sdk.WatchOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[sdk.EventType][]string{}
	expect := func(typ sdk.EventType, name string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for !slices.Contains(seen[typ], name) {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					t.Fatalf("the watch ended (%v) before a %s event for %q", w.Err(), typ, name)
				}
				seen[ev.Type] = append(seen[ev.Type], ev.Name)
			case <-timeout:
				t.Fatalf("no %s event for %q; saw %v", typ, name, seen)
			}
		}
	}
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "a.txt"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	expect(sdk.EventCreate, "a.txt")
	if _, err := sb.Commands.Run(ctx, "echo more >> "+filepath.Join(dir, "a.txt")); err != nil {
		t.Fatal(err)
	}
	expect(sdk.EventWrite, "a.txt")
	if _, err := sb.Files.MakeDir(ctx, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	expect(sdk.EventCreate, "sub")
	// Give the recursive watch a moment to add the new directory.
	time.Sleep(100 * time.Millisecond)
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "sub", "b.txt"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	expect(sdk.EventCreate, "sub/b.txt")
	if err := sb.Files.Remove(ctx, filepath.Join(dir, "a.txt")); err != nil {
		t.Fatal(err)
	}
	expect(sdk.EventRemove, "a.txt")
	w.Stop()
	for range w.Events() {
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after Stop = %v", err)
	}

	t.Run("callback", func(t *testing.T) {
		var mu sync.Mutex
		var got []sdk.FilesystemEvent
		w, err := sb.Files.Watch(ctx, dir, sdk.WatchOptions{OnEvent: func(ev sdk.FilesystemEvent) {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := sb.Files.Write(ctx, filepath.Join(dir, "c.txt"), []byte("c")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "a create event", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(got, func(ev sdk.FilesystemEvent) bool { return ev.Type == sdk.EventCreate && ev.Name == "c.txt" })
		})
	})
}

func TestAgentPTY(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	var out buffer
	term, err := sb.PTY.Create(ctx, sdk.PTYOptions{
		Cols: 80, Rows: 24,
		OnData: out.add,
		Cwd:    t.TempDir(),
		Envs:   map[string]string{"PS1": "$ "},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.PTY.SendInput(ctx, term.PID(), []byte("echo pty-$((40+2)) $TERM; stty size\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the echo", func() bool {
		return strings.Contains(out.String(), "pty-42 xterm-256color") && strings.Contains(out.String(), "24 80")
	})
	if err := sb.PTY.Resize(ctx, term.PID(), 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := sb.PTY.SendInput(ctx, term.PID(), []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the new size", func() bool { return strings.Contains(out.String(), "30 100") })
	if err := sb.PTY.SendInput(ctx, term.PID(), []byte("exit 0\n")); err != nil {
		t.Fatal(err)
	}
	if res, err := term.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Errorf("Wait after exit = %+v, %v", res, err)
	}

	term, err = sb.PTY.Create(ctx, sdk.PTYOptions{Cols: 80, Rows: 24, Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.PTY.Kill(ctx, term.PID()); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Wait(ctx); !sdk.IsCommandExit(err) {
		t.Errorf("Wait after Kill: err = %v, want a *CommandExitError", err)
	}
	if err := sb.PTY.Resize(ctx, term.PID(), 10, 10); !sdk.IsNotFound(err) {
		t.Errorf("Resize of a killed terminal: err = %v, want not found", err)
	}
}

func TestAgentSandbox(t *testing.T) {
	sb := localSandbox(t)
	ctx := testContext(t)
	if sb.ID() != "local" {
		t.Errorf("ID() = %q", sb.ID())
	}
	if ok, err := sb.IsRunning(ctx); !ok || err != nil {
		t.Errorf("IsRunning = %v, %v", ok, err)
	}
	// The test transport has no control plane.
	if err := sb.Kill(ctx); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("Kill: err = %v, want not supported", err)
	}
	if err := sb.SetTimeout(ctx, time.Minute); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("SetTimeout: err = %v, want not supported", err)
	}
	if _, err := sb.GetInfo(ctx); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("GetInfo: err = %v, want not supported", err)
	}
	// Without the access token the agent refuses.
	c := &sdk.Client{Transport: noTokenTransport{&agentTransport{url: agentURL}}}
	bare, err := c.Connect(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Commands.List(ctx); !sdk.IsUnauthenticated(err) {
		t.Errorf("List without the token: err = %v, want unauthenticated", err)
	}
	if _, err := bare.Files.Read(ctx, "/etc/hostname"); !sdk.IsUnauthenticated(err) {
		t.Errorf("Read without the token: err = %v, want unauthenticated", err)
	}
}

type noTokenTransport struct{ *agentTransport }

func (n noTokenTransport) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	return &sdk.DataPlane{BaseURL: n.url}, nil
}

// signedRoundTrip uploads content to path through a signed upload URL made
// with opts, downloads it through a signed download URL, checks it came back
// whole, and returns both URLs.
func signedRoundTrip(t *testing.T, sb *sdk.Sandbox, path string, opts sdk.URLOptions, content string) (up, down string) {
	t.Helper()
	up, err := sb.UploadURL(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(up, "application/octet-stream", strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST to the upload URL: %s", resp.Status)
	}
	down, err = sb.DownloadURL(path, sdk.URLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(down)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != content {
		t.Errorf("GET of the download URL: %s %q, want %q", resp.Status, b, content)
	}
	return up, down
}
