package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/codetest"
	"github.com/lightbearco/tupper/sdk"
)

// These tests run the real code interpreter (agent/interpreter) on the
// host, behind a front that routes like `tupper serve`, and drive it
// through the SDK.

// codeSandbox returns a sandbox whose code interpreter is srv's, reached
// by the routing headers of `tupper serve` or, direct, by address as the
// in-process engine reaches sandboxes.
func codeSandbox(t *testing.T, srv *codetest.Server, id string, direct bool) *sdk.Sandbox {
	t.Helper()
	if direct {
		srv.DirectDataPlane(id)
	} else {
		srv.DataPlane(id)
	}
	c := &sdk.Client{Transport: srv.Transport()}
	sb, err := c.Connect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestRunCodeKeepsStateBetweenCells(t *testing.T) {
	srv := codetest.Start(t)
	for _, direct := range []bool{false, true} {
		name := map[bool]string{false: "routed by header", true: "by address"}[direct]
		t.Run(name, func(t *testing.T) {
			sb := codeSandbox(t, srv, "sbx-"+strings.ReplaceAll(name, " ", "-"), direct)
			if e := codetest.MustRunCode(t, sb, "x = 41"); e.Text() != "" || e.Error != nil || e.MainResult() != nil {
				t.Fatalf("x = 41: %+v", e)
			}
			e := codetest.MustRunCode(t, sb, "print('adding')\nx + 1")
			if e.Text() != "42" || !e.MainResult().IsMainResult || e.ExecutionCount < 2 {
				t.Fatalf("x + 1: text %q, count %d: %+v", e.Text(), e.ExecutionCount, e)
			}
			if got := strings.Join(e.Logs.Stdout, ""); got != "adding\n" || len(e.Logs.Stderr) != 0 {
				t.Fatalf("logs: %+v", e.Logs)
			}
		})
	}
}

// TestRunCodeStreamsOutput: the cell waits for a file that the callback
// makes only once it has seen the cell's first line, so RunCode can only
// return if that line came before the cell ended.
func TestRunCodeStreamsOutput(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)
	for _, tc := range []struct{ lang, code string }{
		{sdk.LanguagePython, "import os, time\nprint('first', flush=True)\nwhile not os.path.exists(%q): time.sleep(0.05)\nprint('second')"},
		{sdk.LanguageJavaScript, "console.log('first'); const fs = require('fs'); await new Promise(r => { const i = setInterval(() => { if (fs.existsSync(%q)) { clearInterval(i); r(); } }, 50); }); console.log('second')"},
		{sdk.LanguageBash, "echo first; while [ ! -e %q ]; do sleep 0.05; done; echo second >&2"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			var seen []string
			e, err := sb.RunCode(codetest.Context(t), fmt.Sprintf(tc.code, gate),
				sdk.WithLanguage(tc.lang),
				sdk.WithCodeTimeout(2*time.Minute),
				sdk.WithOnCodeStdout(func(s string) {
					seen = append(seen, "out:"+s)
					if strings.Contains(s, "first") {
						os.WriteFile(gate, nil, 0o644)
					}
				}),
				sdk.WithOnCodeStderr(func(s string) { seen = append(seen, "err:"+s) }),
			)
			if err != nil {
				t.Fatalf("RunCode: %v (callbacks saw %q)", err, seen)
			}
			got := strings.Join(seen, "")
			if !strings.Contains(got, "first") || !strings.Contains(got, "second") || e.Error != nil {
				t.Fatalf("callbacks saw %q; execution %+v", seen, e)
			}
			if all := strings.Join(append(e.Logs.Stdout, e.Logs.Stderr...), ""); !strings.Contains(all, "first") || !strings.Contains(all, "second") {
				t.Fatalf("logs %+v", e.Logs)
			}
		})
	}
}

func TestRunCodeRichResults(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)

	t.Run("matplotlib plot", func(t *testing.T) {
		var streamed int
		e := codetest.MustRunCode(t, sb, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('growth')\nplt.show()",
			sdk.WithOnResult(func(r sdk.Result) {
				if len(r.PNG) > 0 {
					streamed++
				}
			}))
		i := slices.IndexFunc(e.Results, func(r sdk.Result) bool { return len(r.PNG) > 0 })
		if i < 0 || streamed != 1 {
			t.Fatalf("no PNG result (OnResult saw %d): %+v", streamed, e)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(e.Results[i].PNG))
		if err != nil || cfg.Width == 0 || cfg.Height == 0 {
			t.Fatalf("the plot's PNG does not decode: %v (%+v)", err, cfg)
		}
		if !slices.Contains(e.Results[i].Formats(), "png") {
			t.Errorf("formats %v lack png", e.Results[i].Formats())
		}
	})

	t.Run("DataFrame", func(t *testing.T) {
		e := codetest.MustRunCode(t, sb, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
		m := e.MainResult()
		if m == nil || !strings.Contains(m.HTML, "<table") || !strings.Contains(m.Text, "a") {
			t.Fatalf("main result %+v, want a table in HTML and text", m)
		}
		if f := m.Formats(); !slices.Contains(f, "html") || !slices.Contains(f, "text") {
			t.Errorf("formats %v", f)
		}
	})

	t.Run("display", func(t *testing.T) {
		e := codetest.MustRunCode(t, sb, "from IPython.display import display, Markdown, HTML\ndisplay(Markdown('# hi'))\ndisplay(HTML('<b>b</b>'))\n7")
		if len(e.Results) != 3 || e.Results[0].Markdown != "# hi" || e.Results[0].IsMainResult || e.Results[1].HTML != "<b>b</b>" || e.Text() != "7" {
			t.Fatalf("results %+v", e.Results)
		}
	})
}

func TestRunCodeErrors(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)

	var streamed []sdk.ExecutionError
	e := codetest.MustRunCode(t, sb, "def f():\n    return 1 / 0\nf()", sdk.WithOnError(func(er sdk.ExecutionError) { streamed = append(streamed, er) }))
	if e.Error == nil || e.Error.Name != "ZeroDivisionError" || !strings.Contains(e.Error.Value, "division by zero") || !strings.Contains(e.Error.Traceback, "f()") {
		t.Fatalf("error %+v", e.Error)
	}
	if len(streamed) != 1 || streamed[0] != *e.Error {
		t.Errorf("OnError saw %+v", streamed)
	}
	var asErr error = e.Error
	if !strings.HasPrefix(asErr.Error(), "ZeroDivisionError: ") {
		t.Errorf("ExecutionError.Error() = %q", asErr)
	}
	if e := codetest.MustRunCode(t, sb, "2 * 3"); e.Text() != "6" {
		t.Fatalf("after an error: %+v", e)
	}

	for _, tc := range []struct {
		name string
		opts []sdk.RunCodeOption
		is   func(error) bool
	}{
		{"unknown language", []sdk.RunCodeOption{sdk.WithLanguage("cobol")}, sdk.IsInvalidArgument},
		{"context and language", []sdk.RunCodeOption{sdk.WithLanguage("python"), sdk.WithCodeContext("c1")}, sdk.IsInvalidArgument},
		{"unknown context", []sdk.RunCodeOption{sdk.WithCodeContext("no-such-context")}, sdk.IsNotFound},
		{"bad variable name", []sdk.RunCodeOption{sdk.WithCodeEnv(map[string]string{"A B": "c"})}, sdk.IsInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := sb.RunCode(codetest.Context(t), "1", tc.opts...)
			if !tc.is(err) || e != nil {
				t.Fatalf("RunCode: %v, %+v", err, e)
			}
		})
	}
}

func TestRunCodeLanguages(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)
	codetest.MustRunCode(t, sb, "let a = 20; const double = (n) => n * 2", sdk.WithLanguage(sdk.LanguageJavaScript))
	if e := codetest.MustRunCode(t, sb, "double(a) + 2", sdk.WithLanguage("js")); e.Text() != "42" {
		t.Fatalf("javascript state: %+v", e)
	}
	if e := codetest.MustRunCode(t, sb, "const p: { n: number } = { n: 21 };\np.n * 2", sdk.WithLanguage(sdk.LanguageTypeScript)); e.Text() != "42" {
		t.Fatalf("typescript: %+v", e)
	}
	if e := codetest.MustRunCode(t, sb, "null.x", sdk.WithLanguage("js")); e.Error == nil || e.Error.Name != "TypeError" {
		t.Fatalf("javascript error: %+v", e)
	}
	e := codetest.MustRunCode(t, sb, `echo "$GREETING from bash"; X=7`,
		sdk.WithLanguage(sdk.LanguageBash), sdk.WithCodeEnv(map[string]string{"GREETING": "hello"}))
	if strings.Join(e.Logs.Stdout, "") != "hello from bash\n" {
		t.Fatalf("bash with env: %+v", e)
	}
	if e := codetest.MustRunCode(t, sb, "echo $X; false", sdk.WithLanguage(sdk.LanguageBash)); strings.Join(e.Logs.Stdout, "") != "7\n" || e.Error == nil || e.Error.Name != "CommandExitError" {
		t.Fatalf("bash state and failure: %+v", e)
	}
}

func TestCodeContexts(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)
	ctx := codetest.Context(t)
	dir := t.TempDir()

	cc, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: sdk.LanguagePython, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ID == "" || cc.Language != "python" || cc.Cwd != dir {
		t.Fatalf("created %+v", cc)
	}
	if e := codetest.MustRunCode(t, sb, "import os\nv = 1\nos.getcwd()", sdk.WithCodeContext(cc.ID)); e.Text() != fmt.Sprintf("'%s'", dir) {
		t.Fatalf("cwd: %+v", e)
	}
	if e := codetest.MustRunCode(t, sb, "v"); e.Error == nil || e.Error.Name != "NameError" {
		t.Fatalf("the default context sees the new one's variables: %+v", e)
	}
	js, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: "js"})
	if err != nil || js.Language != sdk.LanguageJavaScript || js.Cwd != srv.Dir {
		t.Fatalf("javascript context: %+v, %v", js, err)
	}
	if e := codetest.MustRunCode(t, sb, "1 + 1", sdk.WithCodeContext(js.ID)); e.Text() != "2" {
		t.Fatalf("javascript context: %+v", e)
	}

	list, err := sb.ListCodeContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	langs := map[string]int{}
	for _, c := range list {
		langs[c.Language]++
	}
	if langs["python"] != 2 || langs["javascript"] != 2 || !slices.Contains(list, *cc) {
		t.Fatalf("list: %+v", list)
	}

	codetest.RestartAndRemove(ctx, t, sb, cc.ID)
	if _, err := sb.CreateCodeContext(ctx, sdk.CodeContextOptions{Language: "cobol"}); !sdk.IsInvalidArgument(err) {
		t.Errorf("a context of an unknown language: %v, want invalid argument", err)
	}
}

// TestRunCodeTimeout: a cell past its timeout is interrupted, RunCode says
// so with what the cell printed, and the context keeps its state.
func TestRunCodeTimeout(t *testing.T) {
	srv := codetest.Start(t)
	sb := codeSandbox(t, srv, "sbx1", false)
	for _, tc := range []struct{ lang, set, spin, check, want string }{
		{"python", "kept = 7", "import time\nprint('spinning', flush=True)\nwhile True: time.sleep(0.1)", "kept", "7"},
		{"javascript", "var kept = 7", "console.log('spinning'); while (true) {}", "kept", "7"},
		{"bash", "kept=7", "echo spinning; sleep 600", "echo $kept", "7"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			codetest.MustRunCode(t, sb, tc.set, sdk.WithLanguage(tc.lang))
			e, err := sb.RunCode(codetest.Context(t), tc.spin, sdk.WithLanguage(tc.lang), sdk.WithCodeTimeout(3*time.Second))
			if !sdk.IsDeadlineExceeded(err) {
				t.Fatalf("RunCode past its timeout: %v", err)
			}
			if e == nil || !strings.Contains(strings.Join(e.Logs.Stdout, ""), "spinning") {
				t.Fatalf("the partial execution: %+v", e)
			}
			after := codetest.MustRunCode(t, sb, tc.check, sdk.WithLanguage(tc.lang))
			got := after.Text()
			if got == "" { // bash has no results: it prints
				got = strings.TrimSpace(strings.Join(after.Logs.Stdout, ""))
			}
			if got != tc.want {
				t.Fatalf("after the interrupted cell: %q, want %q: %+v", got, tc.want, after)
			}
		})
	}

	t.Run("caller's context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := sb.RunCode(ctx, "import time\nprint('spinning', flush=True)\ntime.sleep(600)", sdk.WithOnCodeStdout(func(string) { cancel() }))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunCode whose context ended: %v", err)
		}
		if e := codetest.MustRunCode(t, sb, "kept"); e.Text() != "7" {
			t.Fatalf("after the cancelled cell: %+v", e)
		}
	})
}

func TestRunCodeWithoutInterpreter(t *testing.T) {
	srv := codetest.Start(t)
	srv.BareDataPlane("plain")
	sb, err := (&sdk.Client{Transport: srv.Transport()}).Connect(context.Background(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	ctx := codetest.Context(t)
	if _, err := sb.RunCode(ctx, "1"); !sdk.IsUnavailable(err) || !strings.Contains(err.Error(), "code-interpreter template") {
		t.Errorf("RunCode: %v, want unavailable with a hint", err)
	}
	if _, err := sb.ListCodeContexts(ctx); !sdk.IsUnavailable(err) {
		t.Errorf("ListCodeContexts: %v, want unavailable", err)
	}
}
