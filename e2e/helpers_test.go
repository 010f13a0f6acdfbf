package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"
)

// This file drives the tupper binary as a user would: cli_test.go runs
// its client commands against a `tupper serve` started by daemon_test.go.

// tupperCLI runs the tupper binary with an environment of its own: the
// daemon's URL and a key in TUPPER_API_URL and TUPPER_API_KEY, and none of
// the caller's TUPPER_* or E2B_* settings.
type tupperCLI struct {
	bin string
	env []string
}

func newTupperCLI(t *testing.T, d *serveDaemon, key string) *tupperCLI {
	t.Helper()
	bin, _ := e2eBinaries(t)
	env := append(envWithoutTupper(), "TUPPER_API_URL="+d.URL, "TUPPER_API_KEY="+key)
	return &tupperCLI{bin: bin, env: env}
}

// envWithoutTupper is the test's environment without its TUPPER_* and E2B_*
// settings.
func envWithoutTupper() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TUPPER_") && !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	return env
}

// cliResult is what one run of the binary did.
type cliResult struct {
	stdout, stderr string
	code           int
}

// run runs tupper with args, stdin (nil for none), and a bound of two
// minutes.
func (c *tupperCLI) run(t *testing.T, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("tupper %s: no end within 2 minutes; stderr:\n%s", strings.Join(args, " "), res.stderr)
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("tupper %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// ok runs tupper, fails the test unless it exits 0, and returns its
// standard output.
func (c *tupperCLI) ok(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	res := c.run(t, stdin, args...)
	if res.code != 0 {
		t.Fatalf("tupper %s: exit %d; stderr:\n%s", strings.Join(args, " "), res.code, res.stderr)
	}
	return res.stdout
}

// fails runs tupper, fails the test unless it exits with code and says
// want on standard error, and returns the result.
func (c *tupperCLI) fails(t *testing.T, code int, want string, args ...string) cliResult {
	t.Helper()
	res := c.run(t, nil, args...)
	if res.code != code || !strings.Contains(res.stderr, want) {
		t.Errorf("tupper %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(args, " "), res.code, res.stderr, code, want)
	}
	return res
}

// terminal is tupper running under a pseudo-terminal that it has as its
// controlling terminal, as in an interactive session.
type terminal struct {
	ptmx, tty *os.File
	before    *term.State
	cmd       *exec.Cmd
	mu        sync.Mutex
	out       bytes.Buffer
	readDone  chan struct{}
}

func startInTerminal(t *testing.T, c *tupperCLI, args ...string) *terminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 80, Rows: 24}); err != nil {
		t.Fatal(err)
	}
	tm := &terminal{ptmx: ptmx, tty: tty, readDone: make(chan struct{})}
	if tm.before, err = term.GetState(int(tty.Fd())); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start tupper %s: %v", strings.Join(args, " "), err)
	}
	tm.cmd = cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		ptmx.Close()
		tty.Close()
	})
	go func() {
		defer close(tm.readDone)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return tm
}

func (tm *terminal) send(t *testing.T, s string) {
	t.Helper()
	if _, err := tm.ptmx.Write([]byte(s)); err != nil {
		t.Fatalf("type into the terminal: %v", err)
	}
}

func (tm *terminal) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

func (tm *terminal) expect(t *testing.T, want string) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("%q in the terminal", want), func() bool { return strings.Contains(tm.output(), want) })
}

// resize changes the window size, which sends SIGWINCH to tupper.
func (tm *terminal) resize(t *testing.T, cols, rows uint16) {
	t.Helper()
	if err := pty.Setsize(tm.ptmx, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		t.Fatal(err)
	}
}

// wait waits for tupper to exit and returns its exit code.
func (tm *terminal) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- tm.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("tupper in the terminal: %v", err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("tupper did not exit; terminal output:\n%s", tm.output())
		return 0
	}
}

// restored reports whether the terminal's settings are what they were
// before tupper ran.
func (tm *terminal) restored(t *testing.T) bool {
	t.Helper()
	after, err := term.GetState(int(tm.tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(tm.before, after)
}

// waitUntil polls cond until it holds, or fails the test after bound.
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
