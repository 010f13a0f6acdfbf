package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/codetest"
	"github.com/lightbearco/tupper/sdk"
)

// These tests call run-code's run function on a sandbox whose code
// interpreter is the real one (agent/interpreter) on the host, behind a
// front that routes like `tupper serve`.

func codeSandbox(t *testing.T) (*sdk.Sandbox, *codetest.Server) {
	t.Helper()
	srv := codetest.Start(t)
	srv.DataPlane("sbx")
	sb, err := (&sdk.Client{Transport: srv.Transport()}).Connect(context.Background(), "sbx")
	if err != nil {
		t.Fatal(err)
	}
	return sb, srv
}

// syncBuffer is a bytes.Buffer safe for the writes of callbacks and the
// reads of a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// onWrite, when set, sees each write's text.
	onWrite func(string)
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onWrite != nil {
		s.onWrite(string(p))
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type codeRun struct {
	stdout, stderr string
	err            error
}

// runCodeCLI runs run-code's run function with o on sb, code on stdin.
func runCodeCLI(t *testing.T, sb *sdk.Sandbox, o runCodeOptions, stdin string, stdout *syncBuffer) codeRun {
	t.Helper()
	if stdout == nil {
		stdout = &syncBuffer{}
	}
	var stderr syncBuffer
	g := &globals{stdin: strings.NewReader(stdin), stdout: stdout, stderr: &stderr}
	o.id = sb.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := runCodeIn(ctx, g, &o, sb)
	return codeRun{stdout.String(), stderr.String(), err}
}

func exitStatus(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestRunCode(t *testing.T) {
	sb, _ := codeSandbox(t)

	t.Run("state and the last value", func(t *testing.T) {
		if r := runCodeCLI(t, sb, runCodeOptions{code: "x = 41"}, "", nil); r.err != nil || r.stdout != "" {
			t.Fatalf("x = 41: %+v", r)
		}
		if r := runCodeCLI(t, sb, runCodeOptions{code: "print('adding')\nx + 1"}, "", nil); r.err != nil || r.stdout != "adding\n42\n" {
			t.Fatalf("x + 1: %+v", r)
		}
	})

	t.Run("code from standard input", func(t *testing.T) {
		for _, arg := range []string{"", "-"} {
			if r := runCodeCLI(t, sb, runCodeOptions{code: arg}, "print(x * 2)\n", nil); r.err != nil || r.stdout != "82\n" {
				t.Fatalf("code %q from stdin: %+v", arg, r)
			}
		}
	})

	// The cell waits for a file that the test makes only once the cell's
	// first line reached standard output.
	t.Run("output streams", func(t *testing.T) {
		gate := filepath.Join(t.TempDir(), "gate")
		stdout := &syncBuffer{onWrite: func(s string) {
			if strings.Contains(s, "first") {
				os.WriteFile(gate, nil, 0o644)
			}
		}}
		code := fmt.Sprintf("import os, sys, time\nprint('first', flush=True)\nwhile not os.path.exists(%q): time.sleep(0.05)\nprint('oops', file=sys.stderr)\nprint('second')", gate)
		r := runCodeCLI(t, sb, runCodeOptions{code: code}, "", stdout)
		if r.err != nil || r.stdout != "first\nsecond\n" || r.stderr != "oops\n" {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("an exception", func(t *testing.T) {
		r := runCodeCLI(t, sb, runCodeOptions{code: "def f():\n    return 1 / 0\nf()"}, "", nil)
		if exitStatus(r.err) != 1 || !strings.Contains(r.stderr, "Traceback") || !strings.Contains(r.stderr, "ZeroDivisionError: division by zero") {
			t.Fatalf("%+v", r)
		}
		if strings.Count(r.stderr, "ZeroDivisionError: division by zero") != 1 {
			t.Errorf("the error is printed more than once: %q", r.stderr)
		}
	})

	t.Run("other languages", func(t *testing.T) {
		r := runCodeCLI(t, sb, runCodeOptions{code: `echo "$GREETING"`, language: "bash", env: []string{"GREETING=hi there"}}, "", nil)
		if r.err != nil || r.stdout != "hi there\n" {
			t.Fatalf("bash: %+v", r)
		}
		r = runCodeCLI(t, sb, runCodeOptions{code: "ls /nonexistent", language: "bash"}, "", nil)
		if exitStatus(r.err) != 1 || !strings.Contains(r.stderr, "CommandExitError") {
			t.Fatalf("bash failing: %+v", r)
		}
		r = runCodeCLI(t, sb, runCodeOptions{code: "const a: number = 6; a * 7", language: "ts"}, "", nil)
		if r.err != nil || r.stdout != "42\n" {
			t.Fatalf("typescript: %+v", r)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := runCodeCLI(t, sb, runCodeOptions{code: "print('p')\n{'a': 1}", json: true}, "", nil)
		var e sdk.Execution
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || r.err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if e.Text() != "{'a': 1}" || strings.Join(e.Logs.Stdout, "") != "p\n" {
			t.Fatalf("execution %+v", e)
		}
		r = runCodeCLI(t, sb, runCodeOptions{code: "raise ValueError('v')", json: true}, "", nil)
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || exitStatus(r.err) != 1 || e.Error == nil || e.Error.Name != "ValueError" {
			t.Fatalf("a failing cell with --json: %+v (%v)", r, err)
		}
	})

	t.Run("images", func(t *testing.T) {
		plot := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
		r := runCodeCLI(t, sb, runCodeOptions{code: plot}, "", nil)
		if r.err != nil || !strings.Contains(r.stderr, "result 1 is a png image") || strings.Contains(r.stdout, "Figure") {
			t.Fatalf("without --save-images: %+v", r)
		}
		dir := filepath.Join(t.TempDir(), "plots")
		r = runCodeCLI(t, sb, runCodeOptions{code: plot, saveImages: dir}, "", nil)
		f, err := os.Open(filepath.Join(dir, "result-1.png"))
		if err != nil || r.err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		defer f.Close()
		if _, err := png.DecodeConfig(f); err != nil {
			t.Fatalf("result-1.png: %v", err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		r := runCodeCLI(t, sb, runCodeOptions{code: "import time\nprint('spinning', flush=True)\nwhile True: time.sleep(0.1)", timeout: 2 * time.Second}, "", nil)
		if exitStatus(r.err) != exitTimedOut || r.stdout != "spinning\n" || !strings.Contains(r.stderr, "--timeout") {
			t.Fatalf("%+v", r)
		}
		if r := runCodeCLI(t, sb, runCodeOptions{code: "x"}, "", nil); r.err != nil || r.stdout != "41\n" {
			t.Fatalf("after the timeout: %+v", r)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		cc, err := sb.CreateCodeContext(context.Background(), sdk.CodeContextOptions{Language: "js"})
		if err != nil {
			t.Fatal(err)
		}
		if r := runCodeCLI(t, sb, runCodeOptions{code: "typeof x", context: cc.ID}, "", nil); r.err != nil || r.stdout != "'undefined'\n" {
			t.Fatalf("in a context: %+v", r)
		}
		if r := runCodeCLI(t, sb, runCodeOptions{code: "1", context: "nope"}, "", nil); r.err == nil || !strings.Contains(r.err.Error(), "code context nope not found") {
			t.Fatalf("unknown context: %+v", r)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, o := range []runCodeOptions{
			{code: "1", language: "python", context: "c"},
			{code: "1", timeout: -time.Second},
			{code: "1", env: []string{"NOVALUE"}},
		} {
			if r := runCodeCLI(t, sb, o, "", nil); r.err == nil || exitStatus(r.err) != -1 {
				t.Errorf("%+v: %+v, want an error", o, r)
			}
		}
	})
}
