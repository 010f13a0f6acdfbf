package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/server"
)

// stubImages resolves every name to one empty root: the fake backends
// never read it.
type stubImages struct{ root string }

func (s stubImages) Resolve(ctx context.Context, name string) (*image.Image, error) {
	return &image.Image{ID: "sha256:stub", Names: []string{name}, RootFS: s.root}, nil
}

// TestCreateOnBackend checks that `tupper create --backend NAME` asks the
// daemon for that backend, that `ls` and `info` say which backend each
// sandbox runs on, and that a name the daemon lacks is refused with the
// names it has. The daemon is the real server and engine, on fake
// backends.
func TestCreateOnBackend(t *testing.T) {
	clearAPIEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	const other = "cli-test-other"
	backendtest.Register(t, other, backendtest.NewFake())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: backendtest.NewFake(), BackendName: "cli-test-default",
		BackendConfig: func(name string) backend.Config { return backend.Config{Root: filepath.Join(dir, "backends", name)} },
		Images:        stubImages{dir}, AgentPath: exe,
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
	srv, err := server.New(server.Config{Engine: eng, Keys: keys, Domain: "tupper.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	api := apiOptions{url: hs.URL, key: key}

	var stdout, stderr bytes.Buffer
	g := &globals{stdout: &stdout, stderr: &stderr}
	create := func(backendName string) (string, error) {
		stdout.Reset()
		g.backend = backendName
		err := runCreate(ctx, g, &createOptions{api: api})
		return strings.TrimSpace(stdout.String()), err
	}
	onDefault, err := create("")
	if err != nil {
		t.Fatal(err)
	}
	onOther, err := create(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create("no-such-backend"); err == nil || !strings.Contains(err.Error(), "known backends") || !strings.Contains(err.Error(), other) {
		t.Errorf("create --backend no-such-backend: %v, want the known backends listed", err)
	}

	stdout.Reset()
	if err := runLs(ctx, g, &lsOptions{api: api}); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[f[0]] = f
		}
	}
	if h := rows["SANDBOX"]; len(h) < 4 || h[3] != "BACKEND" {
		t.Errorf("ls header %q, want a BACKEND column", h)
	}
	if rows[onDefault] == nil || rows[onDefault][2] != "cli-test-default" || rows[onOther] == nil || rows[onOther][2] != other {
		t.Errorf("ls printed\n%s\nwant %s on cli-test-default and %s on %s", stdout.String(), onDefault, onOther, other)
	}

	stdout.Reset()
	if err := runInfo(ctx, g, &infoOptions{api: api, id: onOther}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "Backend:") || !strings.Contains(stdout.String(), other) {
		t.Errorf("info printed\n%s\nwant its backend, %s", stdout.String(), other)
	}
}

// TestBackendOpt checks that --backend-opt reaches the default backend as
// its options: a malformed one is refused before anything opens, and a key
// the backend does not know is refused by the backend, naming it.
func TestBackendOpt(t *testing.T) {
	g := &globals{backendOpts: []string{"runc=/usr/sbin/runc", "empty="}}
	opts, err := g.backendOptions()
	if err != nil || opts["runc"] != "/usr/sbin/runc" || len(opts) != 2 {
		t.Fatalf("options %v, %v", opts, err)
	}
	g.backendOpts = []string{"novalue"}
	if _, err := g.backendOptions(); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("--backend-opt novalue: %v, want invalid argument", err)
	}
	// The backend refuses the option when it opens, before the agent is
	// ever used.
	t.Setenv("TUPPER_AGENT", "/bin/true")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--root", t.TempDir(), "--backend", "runc", "--backend-opt", "nosuch=1", "run", "--", "true"}, strings.NewReader(""), &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), `"nosuch"`) {
		t.Errorf("run with an unknown backend option: exit %d, stderr %q; want a refusal naming it", code, stderr.String())
	}
}
