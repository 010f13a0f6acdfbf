package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

// jsPackages are the npm packages under js/ that adapt agent frameworks to
// Tupper. Each builds with `npm run build` (tsc) and tests itself with
// `npm test` (node --test) against the daemon in TUPPER_API_URL.
var jsPackages = []string{"deepagents", "mastra"}

// TestJS builds every package under js/ and runs its node tests against a
// real `tupper serve`: deepagents' whole agent loop on @tupper/deepagents,
// a Mastra workspace on @tupper/mastra and on the published @mastra/e2b.
// The packages see the daemon only through TUPPER_API_URL and
// TUPPER_API_KEY.
func TestJS(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes for two npm packages")
	}
	node := requireNode(t)
	// Template builds (@mastra/e2b's default template) get no egress:
	// nothing leaves the machine.
	d := startServeDaemon(t, "--build-egress", "deny")
	for _, pkg := range jsPackages {
		t.Run(pkg, func(t *testing.T) {
			dir := filepath.Join(testutil.ModuleRoot(), "js", pkg)
			npmCI(t, dir)
			runNPM(t, node, dir, d, "run", "build")
			runNPM(t, node, dir, d, "test")
		})
	}
}

// runNPM runs `npm args...` in dir against d and fails the test with
// npm's output when it fails. npm runs with the node that requireNode
// found first on PATH.
func runNPM(t *testing.T, node, dir string, d *serveDaemon, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = jsEnv(node, d)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("npm %s in %s did not finish within its time and was killed; its output:\n%s", strings.Join(args, " "), dir, out.String())
	case err != nil:
		t.Fatalf("npm %s in %s: %v; its output:\n%s", strings.Join(args, " "), dir, err, out.String())
	}
	t.Logf("npm %s took %s:\n%s", strings.Join(args, " "), took, out.String())
}

// jsEnv is the packages' environment: the test's, without any TUPPER_,
// E2B_ or proxy settings, with node's directory first on PATH, plus the
// daemon's URL and key in TUPPER_API_URL and TUPPER_API_KEY.
func jsEnv(node string, d *serveDaemon) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "TUPPER_"), strings.HasPrefix(k, "E2B_"), strings.HasSuffix(strings.ToUpper(k), "_PROXY"):
			continue
		case k == "PATH":
			kv = "PATH=" + filepath.Dir(node) + string(os.PathListSeparator) + v
		}
		env = append(env, kv)
	}
	return append(env, "TUPPER_API_URL="+d.URL, "TUPPER_API_KEY="+d.Key)
}
