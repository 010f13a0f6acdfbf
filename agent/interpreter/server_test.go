package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

const testToken = "test-token"

// newTestServer serves the interpreter on loopback with the host's
// Debian python3 (with ipykernel, as in the code-interpreter template),
// node and bash.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	_, hs := startTestServer(t)
	return hs
}

// startTestServer is newTestServer that also returns the Server.
func startTestServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		testutil.Skip(t, "needs Debian's python3-ipykernel and python3-jupyter-client (scripts/setup.sh installs them)")
	}
	srv, err := New(Config{AccessToken: testToken, Dir: t.TempDir(), Python: py, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return srv, hs
}

// line is one line of an /execute answer.
type line map[string]any

func (l line) str(k string) string { s, _ := l[k].(string); return s }

// execution is what an /execute answered, line by line.
type execution []line

func (e execution) of(typ string) []line {
	var out []line
	for _, l := range e {
		if l.str("type") == typ {
			out = append(out, l)
		}
	}
	return out
}

func (e execution) stdout() string {
	var b strings.Builder
	for _, l := range e.of("stdout") {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

func (e execution) main() line {
	for _, l := range e.of("result") {
		if l["is_main_result"] == true {
			return l
		}
	}
	return nil
}

func (e execution) err() line {
	if errs := e.of("error"); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// post sends a JSON request and returns the response.
func post(t *testing.T, ctx context.Context, hs *httptest.Server, path string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Access-Token", testToken)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// run executes a cell and returns all its lines, checking the framing
// (one end_of_execution, last).
func run(t *testing.T, hs *httptest.Server, body map[string]any) execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp := post(t, ctx, hs, "/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/execute %v: %s: %s", body, resp.Status, b)
	}
	var e execution
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		e = append(e, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(e) == 0 || e[len(e)-1].str("type") != "end_of_execution" || len(e.of("end_of_execution")) != 1 {
		t.Fatalf("/execute %v: the answer does not end with one end_of_execution: %v", body, e)
	}
	return e
}

func code(c string) map[string]any { return map[string]any{"code": c} }

func TestPythonKeepsStateAndReturnsTheLastExpression(t *testing.T) {
	hs := newTestServer(t)
	if e := run(t, hs, code("x = 41")); e.err() != nil || e.main() != nil {
		t.Fatalf("x = 41: %v", e)
	}
	e := run(t, hs, code("x + 1"))
	if m := e.main(); m.str("text") != "42" {
		t.Fatalf("x + 1: main result %v, want text 42; all: %v", m, e)
	}
	if n := e.of("number_of_executions"); len(n) != 1 || n[0]["execution_count"].(float64) < 2 {
		t.Fatalf("execution count: %v", n)
	}
}

func TestPythonRichResults(t *testing.T) {
	hs := newTestServer(t)
	e := run(t, hs, code(`
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 1, 9])
plt.title("growth")
plt.show()
`))
	var png string
	var chart map[string]any
	for _, r := range e.of("result") {
		if p := r.str("png"); p != "" {
			png = p
			chart, _ = r["chart"].(map[string]any)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(png)
	if err != nil || !bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("the plot did not come back as a PNG (decode err %v): %v", err, e)
	}
	// The same figure as data, E2B's chart.
	if got := fmt.Sprint(chart["type"], " ", chart["title"], " ", chart["elements"]); got != "line growth [map[label:<nil> points:[[1 4] [2 1] [3 9]]]]" {
		t.Fatalf("chart: %s (all: %v)", got, chart)
	}
	e = run(t, hs, code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.xlabel('letter')\nplt.show()"))
	for _, r := range e.of("result") {
		chart, _ = r["chart"].(map[string]any)
	}
	if got := fmt.Sprint(chart["type"], " ", chart["x_label"], " ", chart["elements"]); got != "bar letter [map[group:<nil> label:a value:3] map[group:<nil> label:b value:5]]" {
		t.Fatalf("bar chart: %s (all: %v)", got, chart)
	}

	e = run(t, hs, code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"))
	if m := e.main(); !strings.Contains(m.str("html"), "<table") || !strings.Contains(m.str("text"), "a") {
		t.Fatalf("DataFrame: main result %v, want html with a table", m)
	}

	e = run(t, hs, code("from IPython.display import display, Markdown, HTML\ndisplay(Markdown('# hi'))\ndisplay(HTML('<b>b</b>'))"))
	if r := e.of("result"); len(r) != 2 || r[0].str("markdown") != "# hi" || r[1].str("html") != "<b>b</b>" || r[0]["is_main_result"] != false {
		t.Fatalf("display calls: %v", r)
	}
}

func TestPythonErrorsCarryNameValueAndTraceback(t *testing.T) {
	hs := newTestServer(t)
	e := run(t, hs, code("def f():\n    return 1 / 0\nf()"))
	er := e.err()
	if er.str("name") != "ZeroDivisionError" || !strings.Contains(er.str("value"), "division by zero") || !strings.Contains(er.str("traceback"), "f()") {
		t.Fatalf("error: %v", er)
	}
	// The context lives on.
	if m := run(t, hs, code("2 * 3")).main(); m.str("text") != "6" {
		t.Fatalf("after an error: %v", m)
	}
}

// TestStdoutStreamsBeforeTheCellEnds: the cell waits for a file that the
// test makes only once it has seen the cell's first line.
func TestStdoutStreamsBeforeTheCellEnds(t *testing.T) {
	hs := newTestServer(t)
	for _, tc := range []struct{ name, lang, code string }{
		{"python", "python", "import os, time\nprint('first', flush=True)\nwhile not os.path.exists(%q): time.sleep(0.05)\nprint('second')"},
		{"javascript", "js", "console.log('first'); const fs = require('fs'); await new Promise(r => { const i = setInterval(() => { if (fs.existsSync(%q)) { clearInterval(i); r(); } }, 50); }); console.log('second')"},
		{"bash", "bash", "echo first; while [ ! -e %q ]; do sleep 0.05; done; echo second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := filepath.Join(t.TempDir(), "gate")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			resp := post(t, ctx, hs, "/execute", map[string]any{"code": fmt.Sprintf(tc.code, gate), "language": tc.lang})
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var seen []string
			for sc.Scan() {
				var l line
				json.Unmarshal(sc.Bytes(), &l)
				seen = append(seen, l.str("type")+":"+strings.TrimSpace(l.str("text")))
				if l.str("type") == "stdout" && strings.Contains(l.str("text"), "first") {
					os.WriteFile(gate, nil, 0o644)
				}
			}
			if got := strings.Join(seen, " "); !strings.Contains(got, "stdout:first") || !strings.Contains(got, "stdout:second") || !strings.HasSuffix(got, "end_of_execution:") {
				t.Fatalf("lines: %s (err %v)", got, sc.Err())
			}
		})
	}
}

func TestClientGoneInterruptsTheCell(t *testing.T) {
	hs := newTestServer(t)
	for _, tc := range []struct{ name, lang, set, spin, check, want string }{
		{"python", "python", "kept = 7", "import time\nprint('spinning', flush=True)\nwhile True: time.sleep(0.1)", "kept", "7"},
		{"javascript", "js", "var kept = 7", "console.log('spinning'); while (true) {}", "kept", "7"},
		{"bash", "bash", "kept=7", "echo spinning; sleep 600", "echo $kept", "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, hs, map[string]any{"code": tc.set, "language": tc.lang})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			resp := post(t, ctx, hs, "/execute", map[string]any{"code": tc.spin, "language": tc.lang})
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() && !strings.Contains(sc.Text(), "spinning") {
			}
			cancel() // the client goes away mid-cell
			resp.Body.Close()

			e := run(t, hs, map[string]any{"code": tc.check, "language": tc.lang})
			got := strings.TrimSpace(e.stdout())
			if m := e.main(); m != nil {
				got = m.str("text")
			}
			if got != tc.want {
				t.Fatalf("after the interrupted cell: got %q, want %q (the context lost its state or hangs): %v", got, tc.want, e)
			}
		})
	}
}

func TestJavaScriptAndTypeScript(t *testing.T) {
	hs := newTestServer(t)
	run(t, hs, map[string]any{"code": "let a = 20; const double = (n) => n * 2", "language": "javascript"})
	e := run(t, hs, map[string]any{"code": "console.log('a is', a); double(a) + 2", "language": "js"})
	if e.main().str("text") != "42" || e.stdout() != "a is 20\n" {
		t.Fatalf("js state: %v", e)
	}
	e = run(t, hs, map[string]any{"code": "await new Promise(r => setTimeout(() => r(5), 10))", "language": "js"})
	if e.main().str("text") != "5" {
		t.Fatalf("top-level await: %v", e)
	}
	e = run(t, hs, map[string]any{"code": "null.x", "language": "js"})
	if er := e.err(); er.str("name") != "TypeError" || er.str("traceback") == "" {
		t.Fatalf("js error: %v", e)
	}
	e = run(t, hs, map[string]any{"code": "interface P { n: number }\nconst p: P = { n: 21 };\np.n * 2", "language": "ts"})
	if e.main().str("text") != "42" {
		t.Fatalf("typescript: %v", e)
	}
}

func TestBash(t *testing.T) {
	hs := newTestServer(t)
	dir := t.TempDir()
	run(t, hs, map[string]any{"code": "cd " + dir + "; X=7", "language": "bash"})
	e := run(t, hs, map[string]any{"code": "pwd; echo $X; echo oops >&2", "language": "bash"})
	if e.stdout() != dir+"\n7\n" || len(e.of("stderr")) != 1 || e.err() != nil {
		t.Fatalf("bash state: %v", e)
	}
	e = run(t, hs, map[string]any{"code": "false", "language": "bash"})
	if er := e.err(); er.str("name") != "CommandExitError" || er.str("value") != "exit status 1" {
		t.Fatalf("bash failure: %v", e)
	}
	e = run(t, hs, map[string]any{"code": "echo \"$GREETING\"", "language": "bash", "env_vars": map[string]string{"GREETING": "it's here"}})
	if e.stdout() != "it's here\n" {
		t.Fatalf("bash env_vars: %v", e)
	}
	if e := run(t, hs, map[string]any{"code": "echo \"[${GREETING-unset}]\"", "language": "bash"}); e.stdout() != "[unset]\n" {
		t.Fatalf("env_vars outlived their cell: %v", e)
	}
}

func TestEnvVarsLastOneCell(t *testing.T) {
	hs := newTestServer(t)
	e := run(t, hs, map[string]any{"code": "import os\nos.environ['TUPPER_T']", "env_vars": map[string]string{"TUPPER_T": "yes"}})
	if e.main().str("text") != "'yes'" {
		t.Fatalf("env_vars: %v", e)
	}
	if e := run(t, hs, code("os.environ.get('TUPPER_T', 'gone')")); e.main().str("text") != "'gone'" {
		t.Fatalf("env_vars outlived their cell: %v", e)
	}
	// Even a cell that fails gives them back.
	if e := run(t, hs, map[string]any{"code": "raise ValueError(os.environ['TUPPER_T'])", "env_vars": map[string]string{"TUPPER_T": "once"}}); e.err().str("value") != "once" {
		t.Fatalf("failing cell with env_vars: %v", e)
	}
	if e := run(t, hs, code("os.environ.get('TUPPER_T', 'gone')")); e.main().str("text") != "'gone'" {
		t.Fatalf("env_vars outlived their failing cell: %v", e)
	}
}

func TestContexts(t *testing.T) {
	hs := newTestServer(t)
	dir := t.TempDir()
	resp := post(t, context.Background(), hs, "/contexts", map[string]any{"language": "python", "cwd": dir})
	var c contextJSON
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || c.ID == "" || c.Language != "python" || c.Cwd != dir {
		t.Fatalf("create: %s %+v", resp.Status, c)
	}
	if m := run(t, hs, map[string]any{"code": "import os\nv = 1\nos.getcwd()", "context_id": c.ID}).main(); m.str("text") != fmt.Sprintf("'%s'", dir) {
		t.Fatalf("cwd: %v", m)
	}
	// Another context does not see its variables.
	if e := run(t, hs, code("v")); e.err().str("name") != "NameError" {
		t.Fatalf("contexts share state: %v", e)
	}

	list := func() []contextJSON {
		resp, err := hs.Client().Get(hs.URL + "/contexts")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l []contextJSON
		json.NewDecoder(resp.Body).Decode(&l)
		return l
	}
	langs := map[string]int{}
	for _, x := range list() {
		langs[x.Language]++
	}
	if langs["python"] != 2 || langs["javascript"] != 1 {
		t.Fatalf("list: %v", list())
	}

	// A restart ends the running cell with ContextRestarting and drops
	// the state.
	running := make(chan execution)
	go func() {
		running <- run(t, hs, map[string]any{"code": "import time\nprint('go', flush=True)\ntime.sleep(600)", "context_id": c.ID})
	}()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// wait until the cell runs: the restart must catch it mid-way
		if out, _ := exec.Command("pgrep", "-f", "ipykernel").Output(); len(out) > 0 {
			break
		}
	}
	time.Sleep(time.Second)
	resp = post(t, context.Background(), hs, "/contexts/"+c.ID+"/restart", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("restart: %s", resp.Status)
	}
	if e := <-running; e.err().str("name") != "ContextRestarting" {
		t.Fatalf("the running cell: %v", e)
	}
	if e := run(t, hs, map[string]any{"code": "v", "context_id": c.ID}); e.err().str("name") != "NameError" {
		t.Fatalf("state after restart: %v", e)
	}

	req, _ := http.NewRequest(http.MethodDelete, hs.URL+"/contexts/"+c.ID, nil)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %s", resp.Status)
	}
	resp = post(t, context.Background(), hs, "/execute", map[string]any{"code": "1", "context_id": c.ID})
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("execute in a removed context: %s, want 404", resp.Status)
	}
}

func TestBadRequests(t *testing.T) {
	hs := newTestServer(t)
	for _, tc := range []struct {
		name, path, body, token string
		want                    int
	}{
		{"context and language", "/execute", `{"code":"1","context_id":"x","language":"python"}`, testToken, 400},
		{"unknown context", "/execute", `{"code":"1","context_id":"nope"}`, testToken, 404},
		{"unknown language", "/execute", `{"code":"1","language":"cobol"}`, testToken, 400},
		{"malformed JSON", "/execute", `{"code":`, testToken, 400},
		{"bad env name", "/execute", `{"code":"1","env_vars":{"A B":"c"}}`, testToken, 400},
		{"no token", "/execute", `{"code":"1"}`, "", 401},
		{"wrong token", "/execute", `{"code":"1"}`, "nope", 401},
		{"context of unknown language", "/contexts", `{"language":"cobol"}`, "", 400},
		{"relative cwd", "/contexts", `{"cwd":"tmp"}`, "", 400},
		{"restart unknown", "/contexts/nope/restart", ``, "", 404},
		{"too big", "/execute", `{"code":"` + strings.Repeat("x", maxBody) + `"}`, testToken, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, hs.URL+tc.path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("X-Access-Token", tc.token)
			}
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || len(bytes.TrimSpace(b)) == 0 {
				t.Fatalf("%s: %s %q, want %d with a message", tc.name, resp.Status, b, tc.want)
			}
		})
	}
}

// TestSetAccessToken checks that once the token is replaced (the agent's
// /init after a restore), /execute refuses the old one and runs a cell
// with the new one.
func TestSetAccessToken(t *testing.T) {
	srv, hs := startTestServer(t)
	const newToken = "rotated-token-0123456789"
	srv.SetAccessToken(newToken)
	execute := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/execute", strings.NewReader(`{"code":"echo hi","language":"bash"}`))
		req.Header.Set("X-Access-Token", token)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := execute(testToken); status != http.StatusUnauthorized {
		t.Errorf("the old token: %d %s, want 401", status, body)
	}
	if status, body := execute(newToken); status != http.StatusOK || !strings.Contains(body, `"text":"hi\n"`) {
		t.Errorf("the new token: %d %s, want 200 with the cell's output", status, body)
	}
}
