package mcp_test

import (
	"bytes"
	"context"
	"image/png"
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/internal/codetest"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// These tests drive run_code against the real code interpreter
// (agent/interpreter) on the host, behind a front that routes like
// `tupper serve`. Its fallback for sandboxes without an interpreter runs
// on a real sandbox in stack_test.go's TestScenario.

type codeResult struct {
	IsMainResult bool     `json:"is_main_result"`
	Formats      []string `json:"formats"`
	Text         string   `json:"text"`
	HTML         string   `json:"html"`
	Image        string   `json:"image"`
	Note         string   `json:"note"`
}

type runCodeOut struct {
	Language       string       `json:"language"`
	Interpreter    bool         `json:"interpreter"`
	ContextID      string       `json:"context_id"`
	ExitCode       int          `json:"exit_code"`
	Stdout         string       `json:"stdout"`
	Stderr         string       `json:"stderr"`
	Error          string       `json:"error"`
	Traceback      string       `json:"traceback"`
	Results        []codeResult `json:"results"`
	ExecutionCount int          `json:"execution_count"`
}

func (o runCodeOut) main() *codeResult {
	for i := range o.Results {
		if o.Results[i].IsMainResult {
			return &o.Results[i]
		}
	}
	return nil
}

// codeSession serves the MCP tools over srv's sandboxes: "code", which has
// the interpreter, and "plain", which has none.
func codeSession(t *testing.T, srv *codetest.Server, cfg mcp.Config) *mcpsdk.ClientSession {
	t.Helper()
	srv.DataPlane("code")
	srv.BareDataPlane("plain")
	cfg.Client = &sdk.Client{Transport: srv.Transport()}
	s, err := mcp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mcpSession(t, s)
}

func code(kv ...any) map[string]any {
	m := map[string]any{"sandbox": "code"}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func TestRunCodeInTheInterpreter(t *testing.T) {
	srv := codetest.Start(t)
	cs := codeSession(t, srv, mcp.Config{})

	t.Run("state carries over", func(t *testing.T) {
		var out runCodeOut
		callOK(t, cs, "run_code", code("code", "x = 41"), &out)
		if !out.Interpreter || out.ExitCode != 0 || len(out.Results) != 0 {
			t.Fatalf("x = 41: %+v", out)
		}
		res := callOK(t, cs, "run_code", code("language", "python", "code", "print('adding')\nx + 1"), &out)
		if m := out.main(); m == nil || m.Text != "42" || out.Stdout != "adding\n" || out.ExecutionCount < 2 {
			t.Fatalf("x + 1: %+v", out)
		}
		if text := resultText(res); !strings.Contains(text, "adding") || !strings.Contains(text, "42") {
			t.Errorf("text content %q", text)
		}
	})

	t.Run("a plot comes back as an image", func(t *testing.T) {
		var out runCodeOut
		res := callOK(t, cs, "run_code", code("code", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()"), &out)
		var images []*mcpsdk.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*mcpsdk.ImageContent); ok {
				images = append(images, ic)
			}
		}
		if len(images) != 1 || images[0].MIMEType != "image/png" {
			t.Fatalf("image content: %+v (structured %+v)", images, out)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(images[0].Data))
		if err != nil || cfg.Width == 0 {
			t.Fatalf("the image does not decode as PNG: %v", err)
		}
		if len(out.Results) != 1 || out.Results[0].Image != "image/png" {
			t.Errorf("structured results: %+v", out.Results)
		}
		if !strings.Contains(resultText(res), "image/png image") {
			t.Errorf("the text does not mention the image: %q", resultText(res))
		}
	})

	t.Run("a DataFrame comes back as HTML", func(t *testing.T) {
		var out runCodeOut
		callOK(t, cs, "run_code", code("code", "import pandas as pd\npd.DataFrame({'a': [1, 2]})"), &out)
		if m := out.main(); m == nil || !strings.Contains(m.HTML, "<table") {
			t.Fatalf("main result: %+v", out)
		}
	})

	t.Run("an exception", func(t *testing.T) {
		var out runCodeOut
		res := callOK(t, cs, "run_code", code("code", "def f():\n    return 1 / 0\nf()"), &out)
		if out.ExitCode != 1 || out.Error != "ZeroDivisionError: division by zero" || !strings.Contains(out.Traceback, "f()") {
			t.Fatalf("error: %+v", out)
		}
		if !strings.Contains(resultText(res), "ZeroDivisionError") {
			t.Errorf("the text does not show the error: %q", resultText(res))
		}
	})

	t.Run("other languages", func(t *testing.T) {
		var out runCodeOut
		callOK(t, cs, "run_code", code("language", "typescript", "code", "const n: number = 21;\nn * 2"), &out)
		if m := out.main(); m == nil || m.Text != "42" || out.Language != "typescript" {
			t.Fatalf("typescript: %+v", out)
		}
		callOK(t, cs, "run_code", code("language", "bash", "code", `echo "$GREETING"; false`, "env", map[string]any{"GREETING": "hi"}), &out)
		if out.Stdout != "hi\n" || out.ExitCode != 1 || !strings.Contains(out.Error, "CommandExitError") {
			t.Fatalf("bash: %+v", out)
		}
	})

	t.Run("a timeout interrupts the run and keeps the state", func(t *testing.T) {
		callErr(t, cs, "run_code", code("code", "import time\nprint('spinning', flush=True)\nwhile True: time.sleep(0.1)", "timeout_seconds", 2),
			"timed out", "spinning")
		var out runCodeOut
		callOK(t, cs, "run_code", code("code", "x"), &out)
		if m := out.main(); m == nil || m.Text != "41" {
			t.Fatalf("after the timeout: %+v", out)
		}
	})

	t.Run("code contexts", func(t *testing.T) {
		sb, err := (&sdk.Client{Transport: srv.Transport()}).Connect(context.Background(), "code")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cc, err := sb.CreateCodeContext(context.Background(), sdk.CodeContextOptions{Language: "js", Cwd: dir})
		if err != nil {
			t.Fatal(err)
		}
		var out runCodeOut
		callOK(t, cs, "run_code", code("context_id", cc.ID, "code", "process.cwd()"), &out)
		if m := out.main(); m == nil || m.Text != "'"+dir+"'" || out.Language != "javascript" || out.ContextID != cc.ID {
			t.Fatalf("run in a context: %+v", out)
		}
		callErr(t, cs, "run_code", code("context_id", "nope", "code", "1"), `code context "nope" not found`)
		callErr(t, cs, "run_code", code("context_id", cc.ID, "language", "python", "code", "1"), "not both")
		callErr(t, cs, "run_code", code("context_id", cc.ID, "cwd", "/tmp", "code", "1"), "cwd")
	})

	t.Run("without an interpreter", func(t *testing.T) {
		for _, tc := range []struct {
			args  map[string]any
			wants []string
		}{
			{map[string]any{"sandbox": "plain", "language": "typescript", "code": "1"}, []string{"code interpreter", "python and javascript", "template code-interpreter"}},
			{map[string]any{"sandbox": "plain", "language": "bash", "code": "true"}, []string{"run_command"}},
			{map[string]any{"sandbox": "plain", "context_id": "c1", "code": "1"}, []string{"no code interpreter"}},
			{map[string]any{"sandbox": "code", "language": "bash", "cwd": "/tmp", "code": "true"}, []string{"python and javascript"}},
		} {
			callErr(t, cs, "run_code", tc.args, tc.wants...)
		}
	})
}

func TestRunCodeImageLimit(t *testing.T) {
	srv := codetest.Start(t)
	cs := codeSession(t, srv, mcp.Config{ImageLimit: 100})
	var out runCodeOut
	res := callOK(t, cs, "run_code", code("code", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"), &out)
	for _, c := range res.Content {
		if _, ok := c.(*mcpsdk.ImageContent); ok {
			t.Fatal("an image over the limit came back")
		}
	}
	if len(out.Results) != 1 || out.Results[0].Image != "" || !strings.Contains(out.Results[0].Note, "over the image limit") {
		t.Fatalf("results: %+v", out.Results)
	}
}
