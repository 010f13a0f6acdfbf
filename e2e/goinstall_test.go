package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// goInstallVersion is the version the test publishes the module under.
const goInstallVersion = "v0.0.1-installtest"

// TestGoInstall installs tupper as a user who never cloned the repository
// would, `go install github.com/lightbearco/tupper/cmd/tupper@VERSION`,
// from a module proxy on disk that serves the repository's HEAD as that
// version (dependencies come from the usual proxy and the module cache).
// The binary lands alone, with no agent beside it; the daemon it starts
// must build the agent of its own version once, and run a sandbox with it.
func TestGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and builds tupper and its agent")
	}
	testutil.RequiresRunsc(t)
	root := testutil.ModuleRoot()
	proxy := t.TempDir()
	publish(t, root, proxy, "github.com/lightbearco/tupper", goInstallVersion)

	gobin := t.TempDir()
	goEnv := []string{
		"GOPROXY=file://" + proxy + "," + goEnvValue(t, "GOPROXY"),
		"GONOSUMDB=github.com/lightbearco", "GOFLAGS=", "GOWORK=off",
	}
	install := exec.Command("go", "install", "github.com/lightbearco/tupper/cmd/tupper@"+goInstallVersion)
	install.Env = append(os.Environ(), append(goEnv, "GOBIN="+gobin)...)
	install.Dir = t.TempDir() // outside the module: the install must not see it
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	entries, _ := os.ReadDir(gobin)
	if len(entries) != 1 {
		t.Fatalf("go install put %d files in GOBIN, want tupper alone", len(entries))
	}

	state, err := os.MkdirTemp("", "gi-")
	if err != nil {
		t.Fatal(err)
	}
	d := &serveDaemon{
		Root: state, tupper: filepath.Join(gobin, "tupper"), addr: freeLoopbackAddr(t), imageRoot: baseTemplate(t),
		logPath: filepath.Join(state, "serve.log"), env: append(goEnv, "TUPPER_AGENT="),
		http: &http.Client{Timeout: 2 * time.Minute},
	}
	d.URL = "http://" + d.addr
	t.Cleanup(func() { d.cleanup(t) })
	d.start(t)
	agent := filepath.Join(state, "bin", "tupper-agent-"+goInstallVersion+"-linux-"+runtime.GOARCH)
	if _, err := os.Stat(agent); err != nil {
		t.Fatalf("the daemon did not build its agent where it keeps it: %v\n%s", err, d.log())
	}
	ctx := context.Background()
	sb, err := goClient(t, d).Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRun(ctx, t, sb, "echo hi"); got != "hi\n" {
		t.Fatalf("a sandbox of the installed tupper answered %q", got)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

// publish writes a module proxy's files for mod@version into dir, made from
// the repository's HEAD (what a tag would publish: tracked files only).
func publish(t *testing.T, repo, dir, mod, version string) {
	t.Helper()
	at := filepath.Join(dir, mod, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "archive", "--format=zip", "--prefix="+mod+"@"+version+"/", "-o", filepath.Join(at, version+".zip"), "HEAD")
	archive.Dir = repo
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	gomod, err := exec.Command("git", "-C", repo, "show", "HEAD:go.mod").Output()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"list":            version + "\n",
		version + ".mod":  string(gomod),
		version + ".info": `{"Version":"` + version + `","Time":"2026-12-01T00:00:00Z"}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(at, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// goEnvValue is `go env NAME`.
func goEnvValue(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
