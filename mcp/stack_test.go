package mcp_test

import (
	"context"
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// stackOutputLimit is the output limit of the stack tests: small, so that
// truncation is cheap to show.
const stackOutputLimit = 4096

// newStackSession runs the MCP server on a whole in-process Tupper on real
// runsc, whose default template is the Debian test image, and connects a
// go-sdk client to it in memory.
func newStackSession(t *testing.T) (*mcpsdk.ClientSession, *local.Runtime) {
	t.Helper()
	testutil.RequiresRunsc(t)
	storeRoot, name := testutil.TestImage(t)
	// runsc's socket paths under the root must stay under 108 bytes.
	root, err := os.MkdirTemp("", "tm-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := local.Open(ctx, local.Config{
		Root: root, ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t),
		Engine: engine.Config{DefaultTemplate: name},
	})
	if err != nil {
		t.Fatalf("open runtime: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := rt.Engine().KillAll(ctx); err != nil {
			t.Errorf("kill all: %v", err)
		}
		rt.Close()
		os.RemoveAll(root)
	})
	srv, err := mcp.NewServer(mcp.Config{Client: &sdk.Client{Transport: rt}, OutputLimit: stackOutputLimit})
	if err != nil {
		t.Fatal(err)
	}
	return mcpSession(t, srv), rt
}

// onePixelPNG is a 1×1 PNG.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// TestScenario drives the tools as an agent would on a real sandbox:
// create, write a Python program, run it, read what it wrote, follow a
// background command, kill things, and the errors on the way.
func TestScenario(t *testing.T) {
	cs, rt := newStackSession(t)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != len(wantTools) {
		t.Fatalf("tools/list: %d tools, %v; want %d", len(tools.Tools), err, len(wantTools))
	}

	var created struct {
		Sandbox struct {
			SandboxID string `json:"sandbox_id"`
			ExpiresAt string `json:"expires_at"`
		} `json:"sandbox"`
	}
	callOK(t, cs, "create_sandbox", map[string]any{"env": map[string]any{"GREETING": "hi"}}, &created)
	id := created.Sandbox.SandboxID
	if id == "" || created.Sandbox.ExpiresAt == "" {
		t.Fatalf("create_sandbox answered %+v", created)
	}
	sb := map[string]any{"sandbox": id}
	args := func(kv ...any) map[string]any {
		m := map[string]any{"sandbox": id}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	t.Run("python program", func(t *testing.T) {
		prog := "import os\nopen('out.txt', 'w').write('answer=%d\\n' % (6*7))\nprint(os.environ['GREETING'], 'from python')\n"
		callOK(t, cs, "write_file", args("path", "app/hello.py", "content", prog), nil)
		var run struct {
			ExitCode *int   `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		callOK(t, cs, "run_command", args("command", "python3 hello.py", "cwd", "/home/user/app"), &run)
		if run.ExitCode == nil || *run.ExitCode != 0 || run.Stdout != "hi from python\n" {
			t.Errorf("run: exit %v, stdout %q", run.ExitCode, run.Stdout)
		}
		var read struct {
			Content  string `json:"content"`
			Encoding string `json:"encoding"`
			Size     int64  `json:"size"`
		}
		callOK(t, cs, "read_file", args("path", "/home/user/app/out.txt"), &read)
		if read.Content != "answer=42\n" || read.Encoding != "utf-8" || read.Size != 10 {
			t.Errorf("read_file: %+v", read)
		}
		var ls struct {
			Entries []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"entries"`
		}
		callOK(t, cs, "list_files", args("path", "app"), &ls)
		var names []string
		for _, e := range ls.Entries {
			names = append(names, e.Name)
		}
		if strings.Join(names, ",") != "hello.py,out.txt" {
			t.Errorf("list_files app: %v", names)
		}
	})

	t.Run("background command", func(t *testing.T) {
		var started struct {
			PID        int  `json:"pid"`
			Background bool `json:"background"`
		}
		callOK(t, cs, "run_command", args("command", "echo ready; read line; echo got $line; echo oops >&2; exit 3", "background", true), &started)
		if started.PID <= 0 || !started.Background {
			t.Fatalf("run_command background: %+v", started)
		}
		type output struct {
			Running          bool   `json:"running"`
			ExitCode         *int   `json:"exit_code"`
			Stdout           string `json:"stdout"`
			Stderr           string `json:"stderr"`
			NextStdoutOffset int64  `json:"next_stdout_offset"`
		}
		var out output
		deadline := time.Now().Add(30 * time.Second)
		for out.Stdout != "ready\n" && time.Now().Before(deadline) {
			callOK(t, cs, "command_output", args("pid", started.PID), &out)
			time.Sleep(100 * time.Millisecond)
		}
		if !out.Running || out.Stdout != "ready\n" {
			t.Fatalf("command_output before input: %+v", out)
		}
		callOK(t, cs, "send_stdin", args("pid", started.PID, "data", "hello\n"), nil)
		var end output
		callOK(t, cs, "command_output", args("pid", started.PID, "stdout_offset", out.NextStdoutOffset, "wait_seconds", 20), &end)
		if end.Running || end.ExitCode == nil || *end.ExitCode != 3 || end.Stdout != "got hello\n" || end.Stderr != "oops\n" {
			t.Errorf("command_output after the end: %+v", end)
		}

		callOK(t, cs, "run_command", args("command", "sleep 600", "background", true), &started)
		var killed struct {
			ExitCode *int   `json:"exit_code"`
			Error    string `json:"error"`
		}
		callOK(t, cs, "kill_command", args("pid", started.PID), &killed)
		if killed.ExitCode == nil || *killed.ExitCode == 0 {
			t.Errorf("kill_command: %+v, want a non-zero exit", killed)
		}
		callErr(t, cs, "kill_command", args("pid", started.PID), "no process")
	})

	t.Run("run_code", func(t *testing.T) {
		var out struct {
			Stdout   string `json:"stdout"`
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}
		callOK(t, cs, "run_code", args("language", "python", "code", "print(6*7)"), &out)
		if out.Stdout != "42\n" || out.Error != "" {
			t.Errorf("run_code: %+v", out)
		}
		callOK(t, cs, "run_code", args("language", "python", "code", "print('before')\n1/0"), &out)
		if out.Stdout != "before\n" || !strings.Contains(out.Error, "ZeroDivisionError") || out.ExitCode == 0 {
			t.Errorf("run_code raising: %+v", out)
		}
		// The test image has no node.
		callErr(t, cs, "run_code", args("language", "javascript", "code", "console.log(1)"), "node is not installed")
	})

	t.Run("outputs", func(t *testing.T) {
		var run struct {
			ExitCode *int   `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		callOK(t, cs, "run_command", args("command", "head -c 10000 /dev/zero | tr '\\0' a; exit 4"), &run)
		if run.ExitCode == nil || *run.ExitCode != 4 {
			t.Errorf("exit code %v, want 4", run.ExitCode)
		}
		if !strings.Contains(run.Stdout, "[truncated: showing 4096 of 10000 bytes") || len(run.Stdout) > stackOutputLimit+200 {
			t.Errorf("stdout of 10000 bytes came back as %d bytes without the marker", len(run.Stdout))
		}

		png, _ := base64.StdEncoding.DecodeString(onePixelPNG)
		callOK(t, cs, "write_file", args("path", "pics/dot.png", "content", onePixelPNG, "encoding", "base64"), nil)
		res := callOK(t, cs, "read_file", args("path", "pics/dot.png"), nil)
		img, ok := res.Content[0].(*mcpsdk.ImageContent)
		if !ok || img.MIMEType != "image/png" || string(img.Data) != string(png) {
			t.Errorf("read_file of a PNG: content %#v", res.Content[0])
		}
		var bin struct {
			Encoding string `json:"encoding"`
			Content  string `json:"content"`
		}
		callOK(t, cs, "write_file", args("path", "bin", "content", base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255}), "encoding", "base64"), nil)
		callOK(t, cs, "read_file", args("path", "bin"), &bin)
		if bin.Encoding != "base64" || bin.Content != "AAEC/w==" {
			t.Errorf("read_file of binary: %+v", bin)
		}
	})

	t.Run("dirs and errors", func(t *testing.T) {
		var mk struct {
			Created bool `json:"created"`
		}
		callOK(t, cs, "make_dir", args("path", "a/b/c"), &mk)
		if !mk.Created {
			t.Error("make_dir did not create a/b/c")
		}
		callOK(t, cs, "remove_path", args("path", "a"), nil)
		callErr(t, cs, "read_file", args("path", "a/b/c/missing.txt"), "not found", "list_files")
		callErr(t, cs, "read_file", args("path", "/home/user"), "is a directory")
		callErr(t, cs, "remove_path", args("path", "a"), "not found")
		callErr(t, cs, "run_command", args("command", "true", "user", "nobody-here"), "user")
	})

	callOK(t, cs, "kill_sandbox", sb, nil)
	var ls struct {
		Sandboxes []any `json:"sandboxes"`
	}
	callOK(t, cs, "list_sandboxes", nil, &ls)
	if len(ls.Sandboxes) != 0 {
		t.Errorf("list_sandboxes after the kill: %v", ls.Sandboxes)
	}
	callErr(t, cs, "run_command", args("command", "true"), "not found", "list_sandboxes")
	if n := len(rt.Engine().Running()); n != 0 {
		t.Errorf("%d sandboxes still run", n)
	}
}
