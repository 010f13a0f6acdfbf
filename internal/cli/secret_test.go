package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/secret"
	"github.com/lightbearco/tupper/server"
)

// TestSecretCommands runs `tupper secret create, update, ls, rm` against
// the real server and engine (on the fake backend): the value comes from
// standard input or a file less its trailing line break, is never
// printed, and reaches the store as given.
func TestSecretCommands(t *testing.T) {
	clearAPIEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := secret.Open(secret.Config{Dir: filepath.Join(dir, "secrets")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: backendtest.NewFake(), BackendName: "fake",
		Images: stubImages{dir}, AgentPath: exe, Secrets: st, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	key, _, err := keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Engine: eng, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	api := apiOptions{url: hs.URL, key: key}

	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	printed := "" // everything the commands printed
	run := func(stdin string, f func() error) error {
		printed += stdout.String() + stderr.String()
		stdout.Reset()
		stderr.Reset()
		g.stdin = strings.NewReader(stdin)
		return f()
	}
	value := func(name string) string {
		t.Helper()
		info, err := st.Get(ctx, engine.DefaultTeam, name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := st.Value(ctx, engine.DefaultTeam, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	const v1 = "sk-cli-one"
	err = run(v1+"\n", func() error {
		return runSecretCreate(ctx, g, &secretWriteOptions{api: api, ref: "OpenAI", metadata: []string{"team=ml"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(stdout.String())
	if !secret.IsID(id) || !strings.Contains(stderr.String(), "${e2b.secrets.openai}") {
		t.Errorf("create printed %q and %q; want the id, and the placeholder on stderr", stdout.String(), stderr.String())
	}
	if got := value("openai"); got != v1 {
		t.Errorf("stored value %q, want %q without the line break", got, v1)
	}
	if err := run("x", func() error { return runSecretCreate(ctx, g, &secretWriteOptions{api: api, ref: "openai"}) }); err == nil || !strings.Contains(err.Error(), "tupper secret update") {
		t.Errorf("create of an existing name: %v, want a pointer to update", err)
	}
	if err := run("\n", func() error { return runSecretCreate(ctx, g, &secretWriteOptions{api: api, ref: "empty"}) }); err == nil {
		t.Error("an empty value was stored")
	}

	file := filepath.Join(dir, "new-value")
	const v2 = "sk-cli-two"
	os.WriteFile(file, []byte(v2+"\r\n"), 0o600)
	if err := run("", func() error {
		return runSecretUpdate(ctx, g, &secretWriteOptions{api: api, ref: id, value: secretValueOptions{valueFile: file}})
	}); err != nil {
		t.Fatal(err)
	}
	if got := value("openai"); got != v2 {
		t.Errorf("value after update %q, want %q", got, v2)
	}
	if err := run("v", func() error { return runSecretUpdate(ctx, g, &secretWriteOptions{api: api, ref: "nosuch"}) }); err == nil || !strings.Contains(err.Error(), "tupper secret ls") {
		t.Errorf("update of an unknown secret: %v", err)
	}

	if err := run("", func() error { return runSecretLs(ctx, g, &secretLsOptions{api: api}) }); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.Contains(out, "openai") || !strings.Contains(out, id) || !strings.Contains(out, "team=ml") {
		t.Errorf("ls printed\n%s", out)
	}
	if err := run("", func() error { return runSecretLs(ctx, g, &secretLsOptions{api: api, json: true}) }); err != nil {
		t.Fatal(err)
	}
	var listed []secretJSON
	if err := json.Unmarshal(stdout.Bytes(), &listed); err != nil || len(listed) != 1 || listed[0].CurrentVersion != 2 {
		t.Errorf("ls --json: %s (%v)", stdout.String(), err)
	}

	err = run("", func() error {
		return runEach(ctx, g, &api, secretRmSpec(), []string{"openai", "nosuch"})
	})
	if err == nil || !strings.Contains(stderr.String(), "secret nosuch not found") {
		t.Errorf("rm of one known and one unknown: %v, stderr %q", err, stderr.String())
	}
	if _, err := st.Get(ctx, engine.DefaultTeam, id); err == nil {
		t.Error("the secret is still there after rm")
	}

	// No command printed a value.
	printed += stdout.String() + stderr.String()
	for _, v := range []string{v1, v2} {
		if strings.Contains(printed, v) {
			t.Errorf("a command printed the value %q", v)
		}
	}
}
