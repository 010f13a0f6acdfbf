package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend/runc"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestE2BSDK runs the published e2b JS SDK, at every version pinned in
// e2b/package.json, through e2b/scenario.mjs against a real `tupper serve`:
// the SDK unchanged, configured only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY.
func TestE2BSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a dozen gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t)
	for _, v := range versions {
		t.Run("e2b@"+v, func(t *testing.T) {
			runScenario(t, node, dir, d, "e2b@"+v)
		})
	}
}

// TestE2BSDKOnRunc runs the same scenario, with the newest pinned SDK,
// against a daemon whose sandboxes are runc containers: the backend is
// the daemon's business, and the SDK sees no difference.
func TestE2BSDKOnRunc(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a dozen containers")
	}
	requireRunc(t)
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t, "--backend", "runc")
	// The daemon's sandboxes are containers in a user namespace of their
	// own, which a gVisor sandbox is not.
	ctx := context.Background()
	sb, err := goClient(t, d).Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := strings.Fields(mustRun(ctx, t, sb, "cat /proc/self/uid_map")); len(m) != 3 || m[1] == "0" {
		t.Fatalf("uid_map %q: the sandbox is not a runc container", m)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	runScenario(t, node, dir, d, "e2b@"+versions[0])
}

// requireRunc skips the test when runc is missing, and fails it in CI.
func requireRunc(t *testing.T) {
	t.Helper()
	if _, err := runc.FindRunc(); err != nil {
		testutil.Skip(t, "runc not found ("+err.Error()+"): scripts/setup.sh installs it")
	}
}

// minNode is the oldest Node the pinned SDKs support (their "engines").
var minNode = [3]int{20, 18, 1}

// requireNode returns node's path, skipping the test when it is missing or
// older than minNode.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Skip(t, "node is not installed: apt-get install nodejs npm")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		testutil.Skip(t, "npm is not installed: apt-get install npm")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	v := strings.TrimSpace(string(out))
	m := regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("node --version printed %q", v)
	}
	var have [3]int
	for i := range have {
		have[i], _ = strconv.Atoi(m[i+1])
	}
	if slices.Compare(have[:], minNode[:]) < 0 {
		testutil.Skip(t, fmt.Sprintf("node %s is older than %d.%d.%d, which the e2b SDK needs", v, minNode[0], minNode[1], minNode[2]))
	}
	return node
}

// pinnedSDKVersions reads the e2b versions from package.json, whose
// dependencies alias each as "e2b-<version>": "npm:e2b@<version>".
func pinnedSDKVersions(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	var versions []string
	for alias, spec := range pkg.Dependencies {
		v, ok := strings.CutPrefix(alias, "e2b-")
		if !ok {
			continue
		}
		if spec != "npm:e2b@"+v {
			t.Fatalf("package.json: dependency %q is %q, want the exact pin %q", alias, spec, "npm:e2b@"+v)
		}
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		t.Fatal("package.json pins no e2b version")
	}
	// Newest first.
	slices.SortFunc(versions, func(a, b string) int { return strings.Compare(b, a) })
	return versions
}

// npmCI installs e2b/node_modules from package-lock.json unless the
// installed tree was made from this very lock file. npm's cache lives under
// testutil.CacheDir(), so that later installs need no network.
func npmCI(t *testing.T, dir string) {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatalf("e2b/package-lock.json: %v", err)
	}
	sum := sha256.Sum256(lock)
	stamp := filepath.Join(dir, "node_modules", ".tupper-lock-sha256")
	want := hex.EncodeToString(sum[:])
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return
	}
	cache := filepath.Join(testutil.CacheDir(), "npm")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", "--cache", cache)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s (cache %s): %v\n%s", dir, cache, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("npm ci took %s", time.Since(start).Round(time.Millisecond))
}

// runScenario runs scenario.mjs for sdk against d, streaming its output
// into the test log, and fails the test when it fails.
func runScenario(t *testing.T, node, dir string, d *serveDaemon, sdk string) {
	t.Helper()
	runScript(t, node, dir, d, "scenario.mjs", sdk)
}

// runScript runs the node script in dir with argument sdk against d, with
// extra environment variables, and fails the test when a step fails.
func runScript(t *testing.T, node, dir string, d *serveDaemon, script, sdk string, extraEnv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, sdk)
	cmd.Dir = dir
	cmd.Env = append(scenarioEnv(d), extraEnv...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	w.Close()
	var failed string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if failed == "" && strings.HasPrefix(line, "FAIL ") {
			failed = line
		}
	}
	r.Close()
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s: the scenario did not finish within its time and was killed", sdk)
	case err != nil && failed != "":
		t.Fatalf("%s: %s", sdk, failed)
	case err != nil:
		t.Fatalf("%s: node scenario.mjs: %v", sdk, err)
	}
}

// scenarioEnv is the environment of the scenario: the test's, without any
// E2B or proxy settings, plus exactly the three variables the SDK needs.
func scenarioEnv(d *serveDaemon) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "E2B_") || strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "E2B_API_URL="+d.URL, "E2B_SANDBOX_URL="+d.URL, "E2B_API_KEY="+d.Key)
}
