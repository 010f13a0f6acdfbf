package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// writeFiles writes files (path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoSDKTemplateBuild builds a template with the Go SDK against a real
// `tupper serve` on runsc, whose build sandboxes get no egress: from the
// test image, with RUN as root and as the default user, COPY of a
// directory (less what .dockerignore leaves out) and of a file with an
// owner and a mode, ENV, WORKDIR and a start command with WaitForURL. A
// sandbox created by the template's name, and one by its id, sees every
// step and the server answering; the same build again takes every step
// from the cache; the e2b JS SDK building the same template uploads
// nothing and runs no step (the Go SDK hashes and serializes as it does);
// a failing RUN fails with its step; list and delete.
func TestGoSDKTemplateBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds templates in gVisor sandboxes")
	}
	_, base := testutil.TestImage(t)
	d := startServeDaemon(t, "--build-egress", "deny")
	c := goClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	contextDir := t.TempDir()
	writeFiles(t, contextDir, map[string]string{
		"app/main.py":     "print('from main')\n",
		"app/lib/util.py": "X = 42\n",
		"app/debug.log":   "left out by .dockerignore\n",
		"config.txt":      "configured\n",
		".dockerignore":   "app/*.log\n",
	})
	name := fmt.Sprintf("e2e-go-template-%d", os.Getpid())
	// The first step names this run, so that the first build runs every
	// step whatever earlier runs left in the shared image store's cache.
	runID := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	define := func() *sdk.Template {
		tpl := &sdk.Template{ContextDir: contextDir}
		return tpl.FromImage(base).
			RunCmd("echo built > /opt/marker && rm -f /etc/motd # run "+runID, "root").
			Copy("app", "/srv/app", "", 0).
			Copy("config.txt", "/etc/tupper-test/", "root", 0o640).
			SetEnvs(map[string]string{"GREETING": "hello from the template"}).
			SetWorkdir("/srv/app").
			RunCmd("python3 main.py > ran.txt && whoami > who.txt", "").
			SetStartCmd("python3 -m http.server 8000 --directory /srv/app", sdk.WaitForURL("http://localhost:8000/ran.txt", 200))
	}
	build := func(tpl *sdk.Template, name string, opts ...sdk.BuildOption) (*sdk.TemplateBuild, []string, error) {
		var logs []string
		opts = append(opts, sdk.WithOnBuildLog(func(l sdk.TemplateLogEntry) { logs = append(logs, l.Message) }))
		b, err := c.BuildTemplate(ctx, tpl, name, opts...)
		return b, logs, err
	}
	countCached := func(logs []string) int {
		n := 0
		for _, l := range logs {
			if strings.HasPrefix(l, "CACHED ") {
				n++
			}
		}
		return n
	}

	first, logs, err := build(define(), name)
	if err != nil {
		t.Fatalf("build: %v\nlog:\n%s", err, strings.Join(logs, "\n"))
	}
	if first.TemplateID == "" || first.BuildID == "" || first.Name != name {
		t.Errorf("build = %+v", first)
	}
	joined := strings.Join(logs, "\n")
	for _, want := range []string{"Uploaded 'app'", "Uploaded 'config.txt'", "[1/6] RUN", "[6/6] RUN"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the log lacks %q:\n%s", want, joined)
		}
	}
	if n := countCached(logs); n != 0 {
		t.Errorf("%d steps came from the cache in the first build:\n%s", n, joined)
	}
	if ok, err := c.TemplateExists(ctx, name); err != nil || !ok {
		t.Errorf("TemplateExists(%s) = %v, %v", name, ok, err)
	}

	t.Run("sandboxes see every step", func(t *testing.T) {
		for _, tmpl := range []string{name, first.TemplateID} {
			sb, err := c.Create(ctx, sdk.CreateOptions{Template: tmpl, Timeout: 5 * time.Minute})
			if err != nil {
				t.Fatalf("create from %s: %v", tmpl, err)
			}
			defer sb.Kill(context.WithoutCancel(ctx))
			checks := []struct{ user, cmd, want string }{
				{"", "cat /opt/marker", "built"},
				{"", "test -e /etc/motd && echo there || echo gone", "gone"},
				{"", "cat /srv/app/main.py /srv/app/lib/util.py", "print('from main')\nX = 42"},
				{"", "test -e /srv/app/debug.log && echo there || echo gone", "gone"},
				{"root", "stat -c '%U %a' /srv/app/main.py /etc/tupper-test/config.txt", "user 644\nroot 640"},
				{"root", "cat /etc/tupper-test/config.txt", "configured"},
				{"", "cat /srv/app/ran.txt /srv/app/who.txt", "from main\nuser"},
				{"", `echo "$GREETING"; pwd; whoami`, "hello from the template\n/srv/app\nuser"},
				// Ready when create returns: the start command's server
				// answers at once.
				{"", "curl -s http://localhost:8000/ran.txt", "from main"},
			}
			for _, ck := range checks {
				var opts []sdk.CommandOption
				if ck.user != "" {
					opts = append(opts, sdk.WithUser(ck.user))
				}
				res, err := sb.Commands.Run(ctx, ck.cmd, opts...)
				if err != nil {
					t.Errorf("%s: %s: %v", tmpl, ck.cmd, err)
					continue
				}
				if got := strings.TrimSpace(res.Stdout); got != ck.want {
					t.Errorf("%s: %s = %q, want %q", tmpl, ck.cmd, got, ck.want)
				}
			}
		}
	})

	t.Run("the same build comes from the cache", func(t *testing.T) {
		again, logs, err := build(define(), name)
		if err != nil {
			t.Fatalf("build again: %v", err)
		}
		if again.BuildID == first.BuildID || again.TemplateID != first.TemplateID {
			t.Errorf("second build %+v, first %+v: want a new build of the same template", again, first)
		}
		joined := strings.Join(logs, "\n")
		if n := countCached(logs); n != 6 {
			t.Errorf("%d steps from the cache, want 6:\n%s", n, joined)
		}
		for _, want := range []string{"Skipping upload of 'app', already cached", "Skipping upload of 'config.txt', already cached"} {
			if !strings.Contains(joined, want) {
				t.Errorf("the log lacks %q:\n%s", want, joined)
			}
		}
	})

	t.Run("the e2b JS SDK's same template is the same build", func(t *testing.T) {
		node := requireNode(t)
		dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
		versions := pinnedSDKVersions(t, dir)
		npmCI(t, dir)
		runScript(t, node, dir, d, "template_parity.mjs", "e2b@"+versions[0],
			"BASE_IMAGE="+base, "CONTEXT_DIR="+contextDir, "TEMPLATE_NAME="+name, "RUN_ID="+runID)
	})

	t.Run("a failing RUN names its step", func(t *testing.T) {
		bad := sdk.NewTemplate().FromImage(base).SetEnvs(map[string]string{"A": "1"}).RunCmd("echo about to fail; exit 3", "")
		_, logs, err := build(bad, name+"-bad")
		var failed *sdk.TemplateBuildError
		if !errors.As(err, &failed) || !sdk.IsTemplateBuildError(err) {
			t.Fatalf("build of a failing step: %v, want a *TemplateBuildError", err)
		}
		if n, ok := failed.StepNumber(); !ok || n != 2 || failed.Step != "2" || failed.Instruction != "RUN echo about to fail; exit 3" {
			t.Errorf("failure at step %q (%d, %v), instruction %q; want step 2, the RUN", failed.Step, n, ok, failed.Instruction)
		}
		if !strings.Contains(failed.Message, "exit code 3") || !strings.Contains(err.Error(), "step 2 (RUN echo about to fail; exit 3)") {
			t.Errorf("error %q, message %q: want the exit code and the step", err, failed.Message)
		}
		if !strings.Contains(strings.Join(logs, "\n"), "about to fail") {
			t.Errorf("the step's output is not in the log:\n%s", strings.Join(logs, "\n"))
		}
		if ok, err := c.TemplateExists(ctx, name+"-bad"); err != nil || ok {
			t.Errorf("a template whose only build failed exists: %v, %v", ok, err)
		}
		if err := c.DeleteTemplate(ctx, name+"-bad"); err != nil {
			t.Errorf("delete the failed template: %v", err)
		}
	})

	t.Run("list and delete", func(t *testing.T) {
		list, err := c.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found *sdk.TemplateInfo
		for i := range list {
			if list[i].TemplateID == first.TemplateID {
				found = &list[i]
			}
		}
		if found == nil || len(found.Names) != 1 || found.Names[0] != name || found.BuildStatus != sdk.TemplateStatusReady || found.BuildCount < 3 {
			t.Fatalf("ListTemplates = %+v, want %s named %s, ready, with its builds", list, first.TemplateID, name)
		}
		if err := c.DeleteTemplate(ctx, name); err != nil {
			t.Fatal(err)
		}
		if ok, err := c.TemplateExists(ctx, name); err != nil || ok {
			t.Errorf("TemplateExists after delete = %v, %v", ok, err)
		}
		if _, err := c.Create(ctx, sdk.CreateOptions{Template: name}); err == nil {
			t.Error("a sandbox started from a deleted template")
		}
		if err := c.DeleteTemplate(ctx, name); !sdk.IsNotFound(err) {
			t.Errorf("second delete: %v, want not found", err)
		}
	})
}
