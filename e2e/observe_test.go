package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// e2bCLIVersion is the @e2b/cli that e2b/package.json pins.
const e2bCLIVersion = "2.19.0"

// observeStartCmd is the start command of TestObserve's template: a line
// on each of its output streams, then a long sleep.
const observeStartCmd = `echo "observe-marker-7f3a: the start command says hello"; echo "observe-marker-7f3a: and warns" >&2; exec sleep infinity`

// TestObserve watches a real gVisor sandbox of a real `tupper serve`:
// its metrics through the published e2b SDK's getMetrics (e2b/observe.mjs)
// and the Go SDK, and its logs through the published @e2b/cli's `sandbox
// logs`, `tupper logs` and the Go SDK. Its template has a start command,
// whose output the log holds beside the agent's records.
func TestObserve(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a gVisor sandbox and waits for its metrics over time")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	testutil.RequiresRunsc(t)
	storeRoot, base := testutil.TestImage(t)
	template := observeImage(t, storeRoot, base)
	d := startServeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := goClient(t, d)
	sb, err := c.Create(ctx, sdk.CreateOptions{Template: template, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()

	// Work to measure.
	const diskMiB = 20
	mustRun(ctx, t, sb, "dd if=/dev/zero of=/home/user/blob bs=1M count="+strconv.Itoa(diskMiB)+" 2>/dev/null && head -c 20000000 /dev/urandom | sha256sum")
	const marker = "observe-marker-7f3a: the start command says hello"

	t.Run("getMetrics", func(t *testing.T) {
		runScript(t, node, dir, d, "observe.mjs", "e2b@2.51.0", "OBSERVE_SANDBOX="+id, "OBSERVE_DISK_MIB="+strconv.Itoa(diskMiB))
	})

	t.Run("Go SDK metrics", func(t *testing.T) {
		info, err := c.GetInfo(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := sb.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) < 2 {
			t.Fatalf("%d samples after the node script's minute, want a series", len(ms))
		}
		for i, m := range ms {
			if m.CPUCount != info.CPUCount || m.MemTotal != uint64(info.MemoryMB)<<20 || m.DiskTotal != uint64(info.DiskSizeMB)<<20 {
				t.Errorf("sample %d: %d CPUs, %d B memory, %d B disk; getInfo says %d CPUs, %d MB, %d MB",
					i, m.CPUCount, m.MemTotal, m.DiskTotal, info.CPUCount, info.MemoryMB, info.DiskSizeMB)
			}
		}
	})

	t.Run("@e2b/cli sandbox logs", func(t *testing.T) {
		for _, format := range []string{"json", "pretty"} {
			out := e2bCLI(ctx, t, node, dir, d, "sandbox", "logs", "--format", format, id)
			if !strings.Contains(out, "agent serving") || !strings.Contains(out, marker) {
				t.Errorf("e2b sandbox logs --format %s shows no agent start or no console line:\n%s", format, out)
			}
			if format != "json" {
				continue
			}
			var seen int
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var e struct {
					Timestamp time.Time `json:"timestamp"`
					Level     string    `json:"level"`
					Logger    string    `json:"logger"`
					Message   string    `json:"message"`
				}
				if !strings.HasPrefix(line, "{") {
					continue // the CLI's banner
				}
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Errorf("line %q: %v", line, err)
					continue
				}
				if e.Timestamp.IsZero() || e.Level == "" || e.Logger == "" {
					t.Errorf("line %q lacks a time, a level or a logger", line)
				}
				seen++
			}
			if seen < 2 {
				t.Errorf("e2b sandbox logs --format json printed %d entries:\n%s", seen, out)
			}
		}
	})

	t.Run("tupper logs and the Go SDK", func(t *testing.T) {
		out := newTupperCLI(t, d, d.Key).ok(t, nil, "logs", id)
		if !strings.Contains(out, "INFO  agent serving") || !strings.Contains(out, marker) {
			t.Errorf("tupper logs shows no agent start or no console line:\n%s", out)
		}
		got, err := sb.Logs(ctx, sdk.LogsSearch("observe-marker-7f3a"))
		if err != nil {
			t.Fatal(err)
		}
		want := []sdk.LogEntry{
			{Level: "info", Message: "start-cmd: " + marker, Fields: map[string]string{"stream": "stdout"}},
			{Level: "info", Message: "start-cmd: observe-marker-7f3a: and warns", Fields: map[string]string{"stream": "stderr"}},
		}
		if d := cmp.Diff(want, got, cmpopts.IgnoreFields(sdk.LogEntry{}, "Timestamp"), cmpopts.SortSlices(func(a, b sdk.LogEntry) bool { return a.Message < b.Message })); d != "" {
			t.Errorf("the start command's lines (-want +got):\n%s", d)
		}
		last, err := sb.Logs(ctx, sdk.LogsBackward(), sdk.LogsLimit(1))
		if err != nil || len(last) != 1 {
			t.Fatalf("the last entry: %+v, %v", last, err)
		}
	})

	t.Run("paused", func(t *testing.T) {
		before, err := sb.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		// A sampling period and more: a running sandbox would have a
		// new sample by now.
		time.Sleep(6 * time.Second)
		after, err := sb.Metrics(ctx)
		if err != nil {
			t.Fatalf("metrics of a paused sandbox: %v", err)
		}
		if len(after) < len(before) {
			t.Errorf("%d samples once paused, %d before", len(after), len(before))
		}
		for _, m := range after {
			if m.Timestamp.After(paused) {
				t.Errorf("a sample at %v, after the pause at %v", m.Timestamp, paused)
			}
		}
		// Its log went into its checkpoint, and is read from there.
		if logs, err := sb.Logs(ctx); err != nil || len(logs) == 0 {
			t.Errorf("logs of a paused sandbox: %d entries, %v; want its log from the checkpoint", len(logs), err)
		}
	})

	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Metrics(ctx); !sdk.IsNotFound(err) {
		t.Errorf("metrics of a killed sandbox: %v, want not found", err)
	}
	if _, err := sb.Logs(ctx); !sdk.IsNotFound(err) {
		t.Errorf("logs of a killed sandbox: %v, want not found", err)
	}
}

// e2bCLI runs the pinned @e2b/cli with args against d (E2B_API_URL and
// E2B_API_KEY, its update check off) and returns its standard output.
func e2bCLI(ctx context.Context, t *testing.T, node, dir string, d *serveDaemon, args ...string) string {
	t.Helper()
	cli := filepath.Join(dir, "node_modules", "@e2b", "cli")
	var pkg struct {
		Version string `json:"version"`
	}
	b, err := os.ReadFile(filepath.Join(cli, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil || pkg.Version != e2bCLIVersion {
		t.Fatalf("@e2b/cli in %s: version %q (%v), want %s: npm ci in e2e/e2b", dir, pkg.Version, err, e2bCLIVersion)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(cli, "dist", "index.js")}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(scenarioEnv(d), "NO_UPDATE_NOTIFIER=1", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("e2b %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// observeImage returns the name of a template of the test image base with
// observeStartCmd as its start command (see testutil.LabelledImage).
func observeImage(t *testing.T, storeRoot, base string) string {
	t.Helper()
	return testutil.LabelledImage(t, storeRoot, base, "tupper-test/observe", map[string]string{image.LabelStartCmd: observeStartCmd})
}
