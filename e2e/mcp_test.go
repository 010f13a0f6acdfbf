package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestMCPStdio runs mcp/scenario.mjs, with the pinned MCP Inspector CLI and
// the MCP TypeScript SDK, against `tupper mcp` as a subprocess (the
// embedded engine on a temporary root), the way Claude Desktop starts it.
func TestMCPStdio(t *testing.T) {
	node, dir := mcpNodeSetup(t)
	tupper, _ := e2eBinaries(t)
	storeRoot, template := testutil.TestImage(t)
	root := mcpShortDir(t, "tms-")
	mcpRunScenario(t, node, dir, "stdio",
		"TUPPER_BIN="+tupper, "MCP_ROOT="+root, "MCP_IMAGE_ROOT="+storeRoot, "MCP_TEMPLATE="+template)
	// Each `tupper mcp` kills the sandboxes it made when its client leaves.
	deadline := time.Now().Add(30 * time.Second)
	for len(mcpLeftovers(root)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sandboxes of `tupper mcp` still run:\n%s", strings.Join(mcpLeftovers(root), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPHTTP runs mcp/scenario.mjs against /mcp of a real `tupper serve`,
// with two API keys: each sees only its own sandboxes.
func TestMCPHTTP(t *testing.T) {
	node, dir := mcpNodeSetup(t)
	d := startServeDaemon(t)
	tupper, _ := e2eBinaries(t)
	out, err := exec.Command(tupper, "--root", d.Root, "keys", "create", "--name", "someone-else").Output()
	if err != nil {
		t.Fatalf("tupper keys create: %v", err)
	}
	other := strings.TrimSpace(string(out))
	mcpRunScenario(t, node, dir, "http", "MCP_URL="+d.URL+"/mcp", "MCP_KEY="+d.Key, "MCP_OTHER_KEY="+other)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ids := d.sandboxIDs(ctx, t); len(ids) != 0 {
		t.Errorf("sandboxes still run after the scenario: %v", ids)
	}
}

// mcpNodeSetup skips the test without node and npm, installs mcp/'s pinned
// packages, and returns node's path and the directory of the scenario.
func mcpNodeSetup(t *testing.T) (node, dir string) {
	t.Helper()
	testutil.RequiresRunsc(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Skip(t, "node is not installed: apt-get install nodejs npm")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		testutil.Skip(t, "npm is not installed: apt-get install npm")
	}
	dir = filepath.Join(testutil.ModuleRoot(), "e2e", "mcp")
	mcpNPMCI(t, dir)
	return node, dir
}

// mcpNPMCI installs dir/node_modules from its package-lock.json, unless the
// installed tree was made from this very lock file. npm's cache lives under
// testutil.CacheDir()/npm, so that later installs need no network.
func mcpNPMCI(t *testing.T, dir string) {
	t.Helper()
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".tupper-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	// No install scripts: none of these packages needs one to run.
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund",
		"--loglevel=error", "--cache", filepath.Join(testutil.CacheDir(), "npm"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("npm ci took %s", time.Since(start).Round(time.Millisecond))
}

// mcpRunScenario runs `node scenario.mjs mode` in dir with extra
// environment, logging its steps, and fails the test when it fails.
func mcpRunScenario(t *testing.T, node, dir, mode string, extraEnv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "scenario.mjs", mode)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// Nothing of the caller's Tupper, E2B or proxy settings may leak in.
		if strings.HasPrefix(k, "TUPPER_") || strings.HasPrefix(k, "E2B_") || strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, append(extraEnv, "MCP_SCRATCH="+t.TempDir())...)
	// A file, not a pipe: sandbox processes must not inherit a pipe that
	// would then never close.
	logPath := filepath.Join(t.TempDir(), "scenario.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	runErr := cmd.Run()
	logf.Close()
	out, _ := os.ReadFile(logPath)
	var steps []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "--- "); ok {
			steps = append(steps, s)
		}
	}
	t.Logf("scenario %s (%s): %s", mode, time.Since(start).Round(time.Millisecond), strings.Join(steps, "; "))
	if runErr != nil || len(steps) == 0 || steps[len(steps)-1] != "ok" {
		t.Fatalf("scenario %s failed (%v):\n%s", mode, runErr, out)
	}
}

// mcpShortDir is a temporary directory with a short path under /tmp: the
// unix socket paths runsc makes under a root must stay under 108 bytes.
func mcpShortDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// mcpLeftovers lists the processes whose command line names root: the
// sandboxes of an engine on root that still run.
func mcpLeftovers(root string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(root+"/")) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}
