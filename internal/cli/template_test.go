package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/server"
	"github.com/lightbearco/tupper/template"
)

// templateDaemon serves the real server, engine (on the fake backend)
// and template builder in-process; builds are not started here (they
// need sandboxes that run commands: e2e/template_cli_test.go starts
// them). It returns the builder, the options that reach the server, and
// a second server's, which builds no templates.
func templateDaemon(t *testing.T) (*template.Builder, apiOptions, apiOptions) {
	t.Helper()
	clearAPIEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: backendtest.NewFake(), BackendName: "fake",
		Images: stubImages{dir}, AgentPath: exe, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	images, err := image.Open(image.Config{Root: filepath.Join(dir, "images"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { images.Close() })
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keys.Close() })
	key, _, err := keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := template.New(template.Config{Root: filepath.Join(dir, "templates"), Engine: eng, Images: images, Sandboxes: &sdk.Client{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	serve := func(tb *template.Builder) apiOptions {
		srv, err := server.New(server.Config{Engine: eng, Keys: keys, Templates: tb, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		return apiOptions{url: hs.URL, key: key}
	}
	return b, serve(b), serve(nil)
}

// TestTemplateLsRm runs `tupper template ls` and `rm` against the real
// server: the team's templates as a table and as JSON, removal by name,
// and an unknown name reported while the others go.
func TestTemplateLsRm(t *testing.T) {
	b, api, _ := templateDaemon(t)
	ctx := context.Background()
	for _, name := range []string{"first", "second"} {
		if _, _, err := b.RequestBuild(ctx, template.Request{Team: engine.DefaultTeam, Name: name, CPUs: 2, MemoryMB: 512}); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}

	if err := runTemplateLs(ctx, g, &templateLsOptions{api: api}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "first ") || !strings.Contains(lines[2], "waiting") {
		t.Errorf("template ls:\n%s", stdout.String())
	}
	stdout.Reset()
	if err := runTemplateLs(ctx, g, &templateLsOptions{api: api, json: true}); err != nil {
		t.Fatal(err)
	}
	var list []templateJSON
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Names[0] != "first" || list[0].CPUCount != 2 || list[0].MemoryMB != 512 || list[0].BuildCount != 1 || !strings.HasPrefix(list[1].TemplateID, "tpl") {
		t.Errorf("template ls --json = %+v", list)
	}

	stdout.Reset()
	err := runEach(ctx, g, &api, templateRmSpec(), []string{"nosuch", "first", list[1].TemplateID})
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(stderr.String(), "template nosuch not found: run `tupper template ls`") {
		t.Errorf("rm of an unknown and two known templates: %v, stderr %q", err, stderr.String())
	}
	if left := b.List(""); len(left) != 0 {
		t.Errorf("templates left after rm: %+v", left)
	}
}

// TestTemplateBuildErrors checks what `tupper template build` says before
// any build runs: no Dockerfile, a Dockerfile error with its line, and a
// daemon that builds no templates.
func TestTemplateBuildErrors(t *testing.T) {
	_, api, noTemplates := templateDaemon(t)
	ctx := context.Background()
	g := &globals{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	dir := t.TempDir()

	err := runTemplateBuild(ctx, g, &templateBuildOptions{api: api, dir: dir})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "no tupper.Dockerfile or Dockerfile in "+dir) {
		t.Errorf("build without a Dockerfile: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM base\nRUN true\nCOPY missing.txt /x\n"), 0o644)
	err = runTemplateBuild(ctx, g, &templateBuildOptions{api: api, dir: dir, name: "x"})
	if err == nil || !strings.Contains(err.Error(), "COPY missing.txt: no files found") {
		t.Errorf("build of a COPY of nothing: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tupper.Dockerfile"), []byte("FROM base\n\nHEALTHCHECK CMD true\n"), 0o644)
	err = runTemplateBuild(ctx, g, &templateBuildOptions{api: api, dir: dir, name: "x"})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tupper.Dockerfile")+":3: HEALTHCHECK") {
		t.Errorf("build of a Dockerfile with HEALTHCHECK: %v", err)
	}
	os.Remove(filepath.Join(dir, "tupper.Dockerfile"))
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM base\nRUN true\n"), 0o644)
	err = runTemplateBuild(ctx, g, &templateBuildOptions{api: noTemplates, dir: dir, name: "x"})
	if !errdefs.IsNotSupported(err) || !strings.Contains(err.Error(), "build templates?") {
		t.Errorf("build on a daemon without templates: %v", err)
	}
}

func TestBuildStep(t *testing.T) {
	tests := []struct {
		name, msg string
		n, total  int
		step      string
		ok        bool
	}{
		{name: "step", msg: "[2/4] COPY app /srv/app", n: 2, total: 4, step: "COPY app /srv/app", ok: true},
		{name: "cached", msg: "CACHED [1/4] RUN echo hi", n: 1, total: 4, step: "RUN echo hi (cached)", ok: true},
		{name: "output", msg: "hi", ok: false},
		{name: "beyond the last", msg: "[5/4] RUN x", ok: false},
		{name: "not at the start", msg: "echo [1/2] x", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, total, step, ok := buildStep(tc.msg)
			if ok != tc.ok || (ok && (n != tc.n || total != tc.total || step != tc.step)) {
				t.Errorf("buildStep(%q) = %d, %d, %q, %v; want %d, %d, %q, %v", tc.msg, n, total, step, ok, tc.n, tc.total, tc.step, tc.ok)
			}
		})
	}
}
