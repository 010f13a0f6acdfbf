package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/progress"
	"github.com/lightbearco/tupper/internal/testutil"
)

// build runs `tupper template build` with args, which may take longer than
// the two minutes other commands get.
func (c *tupperCLI) build(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"template", "build"}, args...)...)
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("tupper template build %s: no end within 15 minutes; stderr:\n%s", strings.Join(args, " "), res.stderr)
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("tupper template build %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// jsonLines decodes each line of out as a JSON object.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("--json printed a line that is not JSON: %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestTemplateCLI drives `tupper template build, ls, rm` against a real
// `tupper serve` on runsc (build sandboxes without egress): a
// tupper.Dockerfile with RUN, COPY --chown, ENV, WORKDIR, CMD and a ready
// comment builds a template that `tupper create --template` starts, with
// every step's result and the start command serving; --json writes the
// log and the result as JSON lines, and a second build takes every step
// from the cache; a failing RUN names its Dockerfile line and exit code;
// a Dockerfile that asks for what templates cannot do fails at its line
// before anything is built; ls and rm.
func TestTemplateCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds templates in gVisor sandboxes")
	}
	_, base := testutil.TestImage(t)
	d := startServeDaemon(t, "--build-egress", "deny")
	cli := newTupperCLI(t, d, d.Key)
	name := fmt.Sprintf("e2e-cli-template-%d", os.Getpid())
	runID := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"tupper.Dockerfile": `# A template for the CLI's test.
FROM ` + base + `
RUN echo cli-built > /opt/cli-marker # run ` + runID + `
COPY --chown=user app /srv/app
ENV GREETING="hi from the cli" \
    PORT=8001
WORKDIR /srv/app
# tupper:ready curl -sf http://localhost:8001/main.py
CMD python3 -m http.server $PORT
`,
		"Dockerfile":  "FROM nothing-to-see\n", // tupper.Dockerfile wins
		"app/main.py": "print('cli')\n",
	})

	res := cli.build(t, "--name", name, dir)
	if res.code != 0 {
		t.Fatalf("template build: exit %d; stderr:\n%s", res.code, res.stderr)
	}
	id := strings.TrimSpace(res.stdout)
	if !strings.HasPrefix(id, "tpl") || strings.ContainsAny(id, " \n") {
		t.Errorf("template build printed %q, want the template's id", res.stdout)
	}
	for _, want := range []string{"[1/4] RUN echo cli-built", "[4/4] WORKDIR /srv/app", "The start command is ready", "Built template " + name} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("the build's log lacks %q:\n%s", want, res.stderr)
		}
	}
	// Among the log, lines for scripts say each step and the result.
	var steps []string
	var result string
	for _, line := range strings.Split(res.stderr, "\n") {
		fields, err := progress.ParseLine(line)
		if err != nil {
			continue
		}
		switch ev, _ := progress.Get(fields, "event"); ev {
		case progress.EventStep:
			step, _ := progress.Get(fields, "step")
			steps = append(steps, step)
		case progress.EventDone:
			result, _ = progress.Get(fields, "result")
		}
	}
	if want := []string{"1/4", "2/4", "3/4", "4/4"}; !slices.Equal(steps, want) || result != id {
		t.Errorf("progress lines say steps %v and result %q, want %v and %s:\n%s", steps, result, want, id, res.stderr)
	}

	t.Run("a sandbox of it", func(t *testing.T) {
		sb := strings.TrimSpace(cli.ok(t, nil, "create", "--template", name, "--timeout", "5m"))
		defer cli.run(t, nil, "kill", sb)
		checks := []struct{ cmd, want string }{
			{"cat /opt/cli-marker; stat -c %U /opt/cli-marker", "cli-built\nroot"},
			{"stat -c %U /srv/app/main.py", "user"},
			{`echo "$GREETING $PORT"; pwd; whoami`, "hi from the cli 8001\n/srv/app\nuser"},
			{"curl -s http://localhost:8001/main.py", "print('cli')"},
		}
		for _, ck := range checks {
			if got := strings.TrimSpace(cli.ok(t, nil, "exec", sb, "--", ck.cmd)); got != ck.want {
				t.Errorf("%s = %q, want %q", ck.cmd, got, ck.want)
			}
		}
	})

	t.Run("--json, from the cache", func(t *testing.T) {
		res := cli.build(t, "--json", "--name", name, dir)
		if res.code != 0 {
			t.Fatalf("template build --json: exit %d; stderr:\n%s", res.code, res.stderr)
		}
		lines := jsonLines(t, res.stdout)
		cached, cachedSteps := 0, 0
		for _, l := range lines[:len(lines)-1] {
			if l["type"] == progress.RecordType {
				if name, _ := l["name"].(string); l["event"] == progress.EventStep && strings.HasSuffix(name, " (cached)") {
					cachedSteps++
				}
				continue
			}
			if l["type"] != "log" || l["timestamp"] == nil {
				t.Errorf("log line %v", l)
			}
			if msg, _ := l["message"].(string); strings.HasPrefix(msg, "CACHED ") {
				cached++
			}
		}
		if cached != 4 || cachedSteps != 4 {
			t.Errorf("%d steps from the cache in the log and %d in the progress, want 4:\n%s", cached, cachedSteps, res.stdout)
		}
		if last := lines[len(lines)-1]; last["type"] != "result" || last["templateID"] != id || last["name"] != name || last["buildID"] == "" {
			t.Errorf("last line %v, want the result naming %s", last, id)
		}
	})

	t.Run("a failing RUN names its line", func(t *testing.T) {
		bad := t.TempDir()
		writeFiles(t, bad, map[string]string{"Dockerfile": "FROM " + base + "\n\nRUN echo about to fail; exit 3\n"})
		res := cli.build(t, "--name", name+"-bad", bad)
		if res.code != 1 || !strings.Contains(res.stderr, filepath.Join(bad, "Dockerfile")+":3:") || !strings.Contains(res.stderr, "exit code 3") ||
			!strings.Contains(res.stderr, "about to fail") {
			t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming Dockerfile:3 and exit code 3, after the step's output", res.code, res.stderr)
		}
		res = cli.build(t, "--json", "--name", name+"-bad", bad)
		lines := jsonLines(t, res.stdout)
		if last := lines[len(lines)-1]; res.code != 1 || last["type"] != "error" || last["step"] != "1" ||
			last["line"] != filepath.Join(bad, "Dockerfile")+":3" || !strings.Contains(fmt.Sprint(last["message"]), "exit code 3") {
			t.Errorf("--json: exit %d, last line %v", res.code, last)
		}
		cli.ok(t, nil, "template", "rm", name+"-bad")
	})

	t.Run("a Dockerfile error names its line", func(t *testing.T) {
		bad := t.TempDir()
		writeFiles(t, bad, map[string]string{"Dockerfile": "FROM " + base + "\nARG VERSION=1\nRUN true\n"})
		res := cli.build(t, "--name", name+"-parse", bad)
		if res.code != 1 || !strings.Contains(res.stderr, "Dockerfile:2: ARG: build arguments are not supported") {
			t.Errorf("exit %d, stderr %q; want exit 1 naming line 2's ARG", res.code, res.stderr)
		}
		if strings.Contains(cli.ok(t, nil, "template", "ls"), name+"-parse") {
			t.Error("a Dockerfile that did not parse made a template")
		}
		cli.fails(t, 1, "no tupper.Dockerfile or Dockerfile in", "template", "build", t.TempDir())
	})

	t.Run("ls and rm", func(t *testing.T) {
		if out := cli.ok(t, nil, "template", "ls"); !strings.Contains(out, name) || !strings.Contains(out, id) || !strings.Contains(out, "ready") {
			t.Errorf("template ls:\n%s", out)
		}
		var list []struct {
			TemplateID  string   `json:"templateID"`
			Names       []string `json:"names"`
			BuildStatus string   `json:"buildStatus"`
			BuildCount  int      `json:"buildCount"`
		}
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "template", "ls", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tpl := range list {
			if tpl.TemplateID == id {
				found = len(tpl.Names) == 1 && tpl.Names[0] == name && tpl.BuildStatus == "ready" && tpl.BuildCount == 2
			}
		}
		if !found {
			t.Errorf("template ls --json = %+v, want %s named %s with 2 builds", list, id, name)
		}
		cli.ok(t, nil, "template", "rm", name)
		if strings.Contains(cli.ok(t, nil, "template", "ls"), name) {
			t.Error("template ls shows a removed template")
		}
		cli.fails(t, 1, "template "+name+" not found", "template", "rm", name)
		res := cli.run(t, nil, "create", "--template", name)
		if res.code == 0 {
			t.Error("create from a removed template worked")
		}
	})
}
