package backendtest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

func (s *suite) testCommands(t *testing.T, sb *sdk.Sandbox) {
	t.Run("echo", func(t *testing.T) {
		res := run(t, sb, "echo hello")
		if res.Stdout != "hello\n" || res.Stderr != "" || res.ExitCode != 0 {
			t.Errorf("echo hello = %+v", res)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		tests := []struct {
			name string
			cmd  string
			want int
		}{
			{name: "true", cmd: "true", want: 0},
			{name: "false", cmd: "false", want: 1},
			{name: "exit 42", cmd: "exit 42", want: 42},
			{name: "missing command", cmd: "no-such-command-here", want: 127},
			{name: "python", cmd: "python3 -c 'import sys; sys.exit(5)'", want: 5},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := sb.Commands.Run(ctx(t), tt.cmd)
				if tt.want == 0 {
					if err != nil {
						t.Fatalf("run %q: %v", tt.cmd, err)
					}
					return
				}
				var exit *sdk.CommandExitError
				if !errors.As(err, &exit) {
					t.Fatalf("run %q: err = %v, want a *sdk.CommandExitError", tt.cmd, err)
				}
				if res == nil || res.ExitCode != tt.want || exit.ExitCode != tt.want {
					t.Errorf("run %q: exit code %+v, want %d", tt.cmd, res, tt.want)
				}
			})
		}
	})

	t.Run("stderr", func(t *testing.T) {
		res := run(t, sb, "echo out; echo err >&2; python3 -c 'import sys; sys.stderr.write(\"py\\n\")'")
		if res.Stdout != "out\n" || res.Stderr != "err\npy\n" {
			t.Errorf("stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
	})

	t.Run("env", func(t *testing.T) {
		res := run(t, sb, `printf '%s|%s|%s' "$GREETING" "$EMPTY" "$PATH"`,
			sdk.WithEnv(map[string]string{"GREETING": "hi there ü", "EMPTY": ""}))
		parts := strings.SplitN(res.Stdout, "|", 3)
		if len(parts) != 3 || parts[0] != "hi there ü" || parts[1] != "" || !strings.Contains(parts[2], "/usr/bin") {
			t.Errorf("env = %q", res.Stdout)
		}
	})

	t.Run("cwd", func(t *testing.T) {
		if res := run(t, sb, "pwd"); res.Stdout != "/home/user\n" {
			t.Errorf("default cwd = %q, want the user's home", res.Stdout)
		}
		if res := run(t, sb, "pwd", sdk.WithCwd("/tmp")); res.Stdout != "/tmp\n" {
			t.Errorf("cwd = %q, want /tmp", res.Stdout)
		}
		if _, err := sb.Commands.Run(ctx(t), "pwd", sdk.WithCwd("/no/such/dir")); err == nil {
			t.Error("a command in a missing directory ran")
		}
	})

	t.Run("users", func(t *testing.T) {
		tests := []struct {
			name string
			opts []sdk.CommandOption
			want string
		}{
			{name: "default", want: "user 1000 /home/user"},
			{name: "user", opts: []sdk.CommandOption{sdk.WithUser("user")}, want: "user 1000 /home/user"},
			{name: "root", opts: []sdk.CommandOption{sdk.WithUser("root")}, want: "root 0 /root"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := run(t, sb, `echo "$(id -un) $(id -u) $HOME"`, tt.opts...)
				if got := strings.TrimSpace(res.Stdout); got != tt.want {
					t.Errorf("user = %q, want %q", got, tt.want)
				}
			})
		}
		if _, err := sb.Commands.Run(ctx(t), "true", sdk.WithUser("no-such-user")); !sdk.IsUnauthenticated(err) {
			t.Errorf("unknown user: err = %v, want class unauthenticated", err)
		}
		// The default user may not do what only root may.
		if _, err := sb.Commands.Run(ctx(t), "touch /etc/forbidden"); !sdk.IsCommandExit(err) {
			t.Errorf("user wrote to /etc: err = %v", err)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		h, err := sb.Commands.Start(ctx(t), "read a; echo got:$a; cat", sdk.WithStdin(true))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SendStdin(ctx(t), []byte("one\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the reply to stdin", func() bool { return h.Stdout() == "got:one\n" })
		if err := h.SendStdin(ctx(t), []byte("two")); err != nil {
			t.Fatal(err)
		}
		if err := h.CloseStdin(ctx(t)); err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(ctx(t))
		if err != nil || res.Stdout != "got:one\ntwo" {
			t.Errorf("Wait = %+v, %v", res, err)
		}
	})

	t.Run("large output", func(t *testing.T) {
		const size = 10 << 20
		var (
			mu       sync.Mutex
			streamed strings.Builder
			chunks   int
		)
		res := run(t, sb, fmt.Sprintf("head -c %d /dev/urandom > /tmp/out.bin && cat /tmp/out.bin", size),
			sdk.WithOnStdout(func(s string) {
				mu.Lock()
				streamed.WriteString(s)
				chunks++
				mu.Unlock()
			}))
		sum := run(t, sb, "sha256sum /tmp/out.bin && rm /tmp/out.bin")
		want, _, _ := strings.Cut(sum.Stdout, " ")
		if len(res.Stdout) != size || fmt.Sprintf("%x", sha256.Sum256([]byte(res.Stdout))) != want {
			t.Errorf("stdout: %d bytes with another sha256 than the %d bytes written (%s)", len(res.Stdout), size, want)
		}
		if streamed.String() != res.Stdout {
			t.Error("the streamed output differs from the result")
		}
		if chunks < 2 {
			t.Errorf("10 MiB arrived in %d chunk(s): not streamed", chunks)
		}
	})

	t.Run("reattach", func(t *testing.T) {
		tag := "bt-" + s.newID()
		h, err := sb.Commands.Start(ctx(t), "echo first; read x; echo second:$x; read y; echo third:$y",
			sdk.WithStdin(true), sdk.WithTag(tag), sdk.WithTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		pid := h.PID()
		waitFor(t, 10*time.Second, "the first line", func() bool { return h.Stdout() == "first\n" })
		h.Disconnect()

		procs, err := sb.Commands.List(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool { return p.PID == pid && p.Tag == tag }) {
			t.Errorf("List has no process %d tagged %q: %+v", pid, tag, procs)
		}

		byPID, err := sb.Commands.Connect(ctx(t), pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Commands.SendStdin(ctx(t), pid, []byte("a\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "output after attaching by pid", func() bool { return strings.Contains(byPID.Stdout(), "second:a\n") })
		byPID.Disconnect()

		byTag, err := sb.Commands.ConnectTag(ctx(t), tag)
		if err != nil {
			t.Fatal(err)
		}
		if byTag.PID() != pid {
			t.Errorf("ConnectTag found pid %d, want %d", byTag.PID(), pid)
		}
		if err := byTag.SendStdin(ctx(t), []byte("b\n")); err != nil {
			t.Fatal(err)
		}
		res, err := byTag.Wait(ctx(t))
		if err != nil || !strings.Contains(res.Stdout, "third:b\n") {
			t.Errorf("Wait after attaching by tag = %+v, %v", res, err)
		}
		if _, err := sb.Commands.Connect(ctx(t), pid); !sdk.IsNotFound(err) {
			t.Errorf("Connect to an ended process: err = %v, want not found", err)
		}
	})

	t.Run("signals", func(t *testing.T) {
		t.Run("SIGTERM", func(t *testing.T) {
			h, err := sb.Commands.Start(ctx(t), "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done")
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the trap to be set", func() bool { return strings.Contains(h.Stdout(), "ready") })
			if err := sb.Commands.Signal(ctx(t), h.PID(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			res, err := h.Wait(ctx(t))
			if !sdk.IsCommandExit(err) || res.ExitCode != 7 || !strings.Contains(res.Stdout, "got-term") {
				t.Errorf("after SIGTERM: %+v, %v; want exit 7 from the trap", res, err)
			}
		})
		t.Run("SIGKILL", func(t *testing.T) {
			h, err := sb.Commands.Start(ctx(t), "trap '' TERM; sleep 60")
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Kill(ctx(t)); err != nil {
				t.Fatal(err)
			}
			res, err := h.Wait(ctx(t))
			if !sdk.IsCommandExit(err) || res.ExitCode == 0 {
				t.Errorf("after SIGKILL: %+v, %v; want a *sdk.CommandExitError", res, err)
			}
		})
		t.Run("unknown pid", func(t *testing.T) {
			if err := sb.Commands.Kill(ctx(t), 999999); !sdk.IsNotFound(err) {
				t.Errorf("Kill(999999): err = %v, want not found", err)
			}
		})
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, err := sb.Commands.Run(ctx(t), "sleep 30", sdk.WithTimeout(500*time.Millisecond))
		if !sdk.IsDeadlineExceeded(err) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("a command with a 500ms timeout ran %v", d)
		}
	})
}

func testPTY(t *testing.T, sb *sdk.Sandbox) {
	var (
		mu  sync.Mutex
		out []byte
	)
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return string(out)
	}
	term, err := sb.PTY.Create(ctx(t), sdk.PTYOptions{
		Cols: 80, Rows: 24,
		OnData: func(b []byte) {
			mu.Lock()
			out = append(out, b...)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		t.Helper()
		if err := sb.PTY.SendInput(ctx(t), term.PID(), []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send("echo pty-$((40+2)) $TERM $(id -un); stty size\n")
	waitFor(t, 10*time.Second, "the terminal to echo", func() bool {
		o := output()
		return strings.Contains(o, "pty-42 xterm-256color user") && strings.Contains(o, "24 80")
	})
	if err := sb.PTY.Resize(ctx(t), term.PID(), 132, 43); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	waitFor(t, 10*time.Second, "the new size", func() bool { return strings.Contains(output(), "43 132") })
	send("exit 3\n")
	res, err := term.Wait(ctx(t))
	if res == nil || res.ExitCode != 3 {
		t.Errorf("after exit 3: %+v, %v", res, err)
	}

	term, err = sb.PTY.Create(ctx(t), sdk.PTYOptions{Cols: 80, Rows: 24, User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.PTY.Kill(ctx(t), term.PID()); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Wait(ctx(t)); !sdk.IsCommandExit(err) {
		t.Errorf("after Kill: err = %v, want a *sdk.CommandExitError", err)
	}
}
