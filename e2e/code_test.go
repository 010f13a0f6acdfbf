package e2e

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/internal/codetest"
	"github.com/lightbearco/tupper/sdk"
)

// TestCodeInterpreterClients drives the code interpreter of a real
// `tupper serve` with the code-interpreter template through Tupper's own
// clients: the Go SDK's RunCode and contexts, the run_code tool of /mcp,
// and `tupper run-code`. (codeinterpreter_test.go does the same with the
// published @e2b/code-interpreter SDK.)
func TestCodeInterpreterClients(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	d := startInterpreterDaemon(t)
	t.Run("GoSDK", func(t *testing.T) { testGoSDKRunCode(t, d) })
	t.Run("MCP", func(t *testing.T) { testMCPRunCode(t, d) })
	t.Run("CLI", func(t *testing.T) { testCLIRunCode(t, d) })
	t.Run("the interpreter comes back after a cell kills it", func(t *testing.T) { testInterpreterComesBack(t, d) })
}

// testInterpreterComesBack: a cell runs as the same user as the
// interpreter's server and may kill it; the agent, which holds its port,
// starts it again, and the next cell runs in a fresh context.
func testInterpreterComesBack(t *testing.T, d *serveDaemon) {
	sb := createCodeSandbox(t, d, "")
	codetest.MustRunCode(t, sb, "kept = 1")
	// The brackets keep pkill from matching the shell that runs it.
	sb.RunCode(codetest.Context(t), `pkill -9 -f "[t]upper-agent code-interpreter"`, sdk.WithLanguage(sdk.LanguageBash))
	var e *sdk.Execution
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if e, err = sb.RunCode(codetest.Context(t), "1 + 1"); err == nil {
			break
		}
	}
	if err != nil || e.Text() != "2" {
		t.Fatalf("a minute after the interpreter was killed: %+v, %v", e, err)
	}
	if e := codetest.MustRunCode(t, sb, "kept"); e.Error == nil || e.Error.Name != "NameError" {
		t.Fatalf("the state of the killed interpreter's kernel: %+v", e)
	}
}

// createCodeSandbox makes a sandbox of template (the code-interpreter one
// when empty) through the Go SDK; the test kills it.
func createCodeSandbox(t *testing.T, d *serveDaemon, template string) *sdk.Sandbox {
	t.Helper()
	if template == "" {
		template = "code-interpreter"
	}
	sb, err := goClient(t, d).Create(codetest.Context(t), sdk.CreateOptions{Template: template, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", template, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb.Kill(ctx)
	})
	return sb
}

func testGoSDKRunCode(t *testing.T, d *serveDaemon) {
	sb := createCodeSandbox(t, d, "")

	t.Run("state carries over", func(t *testing.T) {
		if e := codetest.MustRunCode(t, sb, "x = 41"); e.Error != nil || e.MainResult() != nil {
			t.Fatalf("x = 41: %+v", e)
		}
		if e := codetest.MustRunCode(t, sb, "x + 1"); e.Text() != "42" {
			t.Fatalf("x + 1: %+v", e)
		}
	})

	// The cell waits for a file that the callback writes only once it has
	// seen the cell's first line: RunCode can only return if that line
	// came through the daemon before the cell ended.
	t.Run("output streams before the cell ends", func(t *testing.T) {
		ctx := codetest.Context(t)
		var seen []string
		e, err := sb.RunCode(ctx, "import os, time\nprint('first', flush=True)\nwhile not os.path.exists('/tmp/gate'): time.sleep(0.05)\nprint('second')",
			sdk.WithCodeTimeout(2*time.Minute),
			sdk.WithOnCodeStdout(func(s string) {
				seen = append(seen, s)
				if strings.Contains(s, "first") {
					if _, err := sb.Files.Write(ctx, "/tmp/gate", nil); err != nil {
						t.Errorf("write the gate: %v", err)
					}
				}
			}))
		if err != nil || e.Error != nil || strings.Join(seen, "") != "first\nsecond\n" {
			t.Fatalf("RunCode: %v; callbacks saw %q; %+v", err, seen, e)
		}
	})

	t.Run("a matplotlib plot is a PNG", func(t *testing.T) {
		e := codetest.MustRunCode(t, sb, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('growth')\nplt.show()")
		i := slices.IndexFunc(e.Results, func(r sdk.Result) bool { return len(r.PNG) > 0 })
		if i < 0 {
			t.Fatalf("no PNG result: %+v", e)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(e.Results[i].PNG))
		if err != nil || cfg.Width == 0 || cfg.Height == 0 {
			t.Fatalf("the PNG does not decode: %v %+v", err, cfg)
		}
	})

	t.Run("a DataFrame is HTML", func(t *testing.T) {
		e := codetest.MustRunCode(t, sb, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		if m := e.MainResult(); m == nil || !strings.Contains(m.HTML, "<table") {
			t.Fatalf("main result: %+v", m)
		}
	})

	t.Run("an exception has its name and traceback", func(t *testing.T) {
		e := codetest.MustRunCode(t, sb, "def f():\n    return 1 / 0\nf()")
		if e.Error == nil || e.Error.Name != "ZeroDivisionError" || !strings.Contains(e.Error.Traceback, "f()") {
			t.Fatalf("error: %+v", e.Error)
		}
	})

	t.Run("javascript context and bash", func(t *testing.T) {
		ctx := codetest.Context(t)
		js, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: sdk.LanguageJavaScript, Cwd: "/tmp"})
		if err != nil {
			t.Fatal(err)
		}
		codetest.MustRunCode(t, sb, "let n = 20", sdk.WithCodeContext(js.ID))
		if e := codetest.MustRunCode(t, sb, "process.cwd() + ':' + (n * 2 + 2)", sdk.WithCodeContext(js.ID)); e.Text() != "'/tmp:42'" {
			t.Fatalf("javascript: %+v", e)
		}
		e := codetest.MustRunCode(t, sb, `echo "$GREETING from $(pwd)"`, sdk.WithLanguage(sdk.LanguageBash), sdk.WithCodeEnv(map[string]string{"GREETING": "hello"}))
		if out := strings.Join(e.Logs.Stdout, ""); !strings.HasPrefix(out, "hello from /") || e.Error != nil {
			t.Fatalf("bash: %+v", e)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		ctx := codetest.Context(t)
		cc, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: sdk.LanguagePython, Cwd: "/tmp"})
		if err != nil {
			t.Fatal(err)
		}
		if e := codetest.MustRunCode(t, sb, "import os\nv = 1\nos.getcwd()", sdk.WithCodeContext(cc.ID)); e.Text() != "'/tmp'" {
			t.Fatalf("cwd: %+v", e)
		}
		list, err := sb.ListCodeContexts(ctx)
		if err != nil || !slices.Contains(list, *cc) {
			t.Fatalf("list: %+v, %v", list, err)
		}

		codetest.RestartAndRemove(ctx, t, sb, cc.ID)
	})

	t.Run("a cell past its timeout is interrupted and the context lives on", func(t *testing.T) {
		e, err := sb.RunCode(codetest.Context(t), "import time\nprint('spinning', flush=True)\nwhile True: time.sleep(0.1)", sdk.WithCodeTimeout(3*time.Second))
		if !sdk.IsDeadlineExceeded(err) || e == nil || strings.Join(e.Logs.Stdout, "") != "spinning\n" {
			t.Fatalf("RunCode past its timeout: %v, %+v", err, e)
		}
		if e := codetest.MustRunCode(t, sb, "x * 2"); e.Text() != "82" {
			t.Fatalf("after the interrupted cell: %+v", e)
		}
	})

	t.Run("a sandbox without the interpreter", func(t *testing.T) {
		base := createCodeSandbox(t, d, "base")
		if _, err := base.RunCode(codetest.Context(t), "1"); !sdk.IsUnavailable(err) {
			t.Fatalf("RunCode in a base sandbox: %v, want unavailable", err)
		}
	})
}

func testMCPRunCode(t *testing.T, d *serveDaemon) {
	cs := mcpHTTPSession(t, d.URL+"/mcp", d.Key)
	ctx := codetest.Context(t)
	call := func(name string, args map[string]any) *mcpsdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s(%v): %v", name, args, res.Content)
		}
		return res
	}
	structured := func(res *mcpsdk.CallToolResult) map[string]any {
		m, _ := res.StructuredContent.(map[string]any)
		return m
	}
	created := structured(call("create_sandbox", map[string]any{"template": "code-interpreter"}))
	id, _ := created["sandbox"].(map[string]any)["sandbox_id"].(string)
	if id == "" {
		t.Fatalf("create_sandbox: %v", created)
	}
	defer call("kill_sandbox", map[string]any{"sandbox": id})

	call("run_code", map[string]any{"sandbox": id, "code": "x = 41"})
	out := structured(call("run_code", map[string]any{"sandbox": id, "code": "x + 1"}))
	results, _ := out["results"].([]any)
	if out["interpreter"] != true || len(results) != 1 || results[0].(map[string]any)["text"] != "42" {
		t.Fatalf("x + 1: %v", out)
	}

	res := call("run_code", map[string]any{"sandbox": id, "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
	var images []*mcpsdk.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcpsdk.ImageContent); ok {
			images = append(images, ic)
		}
	}
	if len(images) != 1 || images[0].MIMEType != "image/png" {
		t.Fatalf("the plot: content %v", res.Content)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(images[0].Data)); err != nil {
		t.Fatalf("the plot's image does not decode as PNG: %v", err)
	}

	out = structured(call("run_code", map[string]any{"sandbox": id, "code": "1 / 0"}))
	if !strings.Contains(out["error"].(string), "ZeroDivisionError") || !strings.Contains(out["traceback"].(string), "1 / 0") {
		t.Fatalf("an exception: %v", out)
	}
}

func testCLIRunCode(t *testing.T, d *serveDaemon) {
	sb := createCodeSandbox(t, d, "")
	cli := newTupperCLI(t, d, d.Key)
	cli.ok(t, nil, "run-code", sb.ID(), "x = 41")
	if out := cli.ok(t, strings.NewReader("x + 1\n"), "run-code", sb.ID()); out != "42\n" {
		t.Fatalf("x + 1 from stdin: %q", out)
	}
	dir := t.TempDir()
	cli.ok(t, nil, "run-code", sb.ID(), "--save-images", dir, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
	f, err := os.Open(filepath.Join(dir, "result-1.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.DecodeConfig(f); err != nil {
		t.Fatalf("result-1.png: %v", err)
	}
	cli.fails(t, 1, "ZeroDivisionError: division by zero", "run-code", sb.ID(), "1 / 0")
	if out := cli.ok(t, nil, "run-code", sb.ID(), "--language", "bash", "echo $((6 * 7))"); out != "42\n" {
		t.Fatalf("bash: %q", out)
	}
}
