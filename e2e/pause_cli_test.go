package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCLIPauseSnapshotFork drives pause, resume, snapshot and fork through
// the tupper binary against a real `tupper serve`, as a user would.
func TestCLIPauseSnapshotFork(t *testing.T) {
	d := startServeDaemon(t)
	cli := newTupperCLI(t, d, d.Key)

	id := strings.TrimSpace(cli.ok(t, nil, "create", "--timeout", "10m", "--metadata", "suite=pause-cli"))
	// A counter whose count lives in its shell's memory, and a file.
	cli.ok(t, nil, "exec", id, "--", "(i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.2; done) </dev/null >/dev/null 2>&1 &")
	cli.ok(t, nil, "exec", id, "--", "echo kept > /tmp/kept")
	ticks := func(sb string) int {
		t.Helper()
		n, _ := strconv.Atoi(strings.TrimSpace(cli.ok(t, nil, "exec", sb, "--", "cat /tmp/ticks 2>/dev/null || true")))
		return n
	}
	// goesOn checks that sb has /tmp/kept and a counter that counts on
	// from past since: its processes, memory and files came back.
	goesOn := func(sb string, since int) {
		t.Helper()
		if out := cli.ok(t, nil, "exec", sb, "--", "cat /tmp/kept"); out != "kept\n" {
			t.Errorf("%s: /tmp/kept holds %q", sb, out)
		}
		waitUntil(t, 20*time.Second, "the count to go on in "+sb, func() bool { return ticks(sb) > since })
	}
	waitUntil(t, 20*time.Second, "the counter to count", func() bool { return ticks(id) > 0 })

	t.Run("pause and resume", func(t *testing.T) {
		before := ticks(id)
		cli.ok(t, nil, "pause", id)
		var listed []struct{ SandboxID, State string }
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "ls", "--metadata", "suite=pause-cli", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].SandboxID != id || listed[0].State != "paused" {
			t.Errorf("ls --json after pause = %+v, want %s paused", listed, id)
		}
		if out := cli.ok(t, nil, "ls", "--state", "paused"); !strings.Contains(out, id) || !strings.Contains(out, "paused") {
			t.Errorf("ls --state paused:\n%s", out)
		}
		cli.fails(t, 1, "not running", "pause", id)
		cli.ok(t, nil, "resume", id, "--timeout", "1h")
		var info struct {
			State string
			EndAt time.Time
		}
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "info", id, "--json")), &info); err != nil {
			t.Fatal(err)
		}
		if info.State != "running" || time.Until(info.EndAt) < 50*time.Minute {
			t.Errorf("info after resume --timeout 1h = %+v", info)
		}
		goesOn(id, before)
		cli.fails(t, 1, "not found", "pause", "nope")
	})

	t.Run("snapshot", func(t *testing.T) {
		snap := strings.TrimSpace(cli.ok(t, nil, "snapshot", "create", id, "--name", "cli-warm"))
		if !strings.HasPrefix(snap, "snap-") {
			t.Fatalf("snapshot create printed %q, want a snapshot id", snap)
		}
		cli.fails(t, 1, `snapshot "cli-warm" exists`, "snapshot", "create", id, "--name", "cli-warm")
		var listed []struct {
			SnapshotID string
			Names      []string
			SandboxID  string
			SizeBytes  int64
		}
		if err := json.Unmarshal([]byte(cli.ok(t, nil, "snapshot", "ls", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].SnapshotID != snap || listed[0].SandboxID != id || len(listed[0].Names) != 1 || listed[0].SizeBytes <= 0 {
			t.Errorf("snapshot ls --json = %+v, want %s of %s named cli-warm", listed, snap, id)
		}
		if out := cli.ok(t, nil, "snapshot", "ls"); !strings.Contains(out, snap) || !strings.Contains(out, "cli-warm") {
			t.Errorf("snapshot ls:\n%s", out)
		}
		for _, ref := range []string{snap, "cli-warm"} {
			from := strings.TrimSpace(cli.ok(t, nil, "create", "--template", ref))
			if from == id {
				t.Fatalf("create --template %s printed the source's id", ref)
			}
			goesOn(from, 0)
			cli.ok(t, nil, "kill", from)
		}
		cli.ok(t, nil, "snapshot", "rm", "cli-warm")
		cli.fails(t, 1, "snapshot "+snap+" not found", "snapshot", "rm", snap)
		if out := cli.ok(t, nil, "snapshot", "ls", "--json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("snapshot ls after rm = %s", out)
		}
	})

	t.Run("fork", func(t *testing.T) {
		before := ticks(id)
		out := cli.ok(t, nil, "fork", id, "-n", "2")
		forks := strings.Fields(out)
		if len(forks) != 2 || forks[0] == forks[1] || forks[0] == id || forks[1] == id {
			t.Fatalf("fork -n 2 printed %q, want two new ids", out)
		}
		for _, f := range forks {
			goesOn(f, before)
		}
		cli.ok(t, nil, append([]string{"kill"}, forks...)...)
		cli.fails(t, 1, "want at least 1", "fork", id, "-n", "0")
	})

	t.Run("on-timeout pause", func(t *testing.T) {
		short := strings.TrimSpace(cli.ok(t, nil, "create", "--timeout", "2s", "--on-timeout", "pause", "--auto-resume"))
		waitUntil(t, time.Minute, "the sandbox to pause at its timeout", func() bool {
			var info struct{ State string }
			return json.Unmarshal([]byte(cli.ok(t, nil, "info", short, "--json")), &info) == nil && info.State == "paused"
		})
		cli.fails(t, 1, "needs --on-timeout pause", "create", "--auto-resume")
		cli.fails(t, 1, "want kill or pause", "create", "--on-timeout", "sleep")
	})
}
