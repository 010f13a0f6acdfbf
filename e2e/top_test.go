package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTop runs `tupper top` against a real `tupper serve` with a gVisor
// sandbox that keeps a CPU busy: one snapshot as a table and as JSON, each
// with the sandbox's CPU and memory.
func TestTop(t *testing.T) {
	d := startServeDaemon(t)
	cli := newTupperCLI(t, d, d.Key)
	id := strings.TrimSpace(cli.ok(t, nil, "create", "--timeout", "5m"))
	defer cli.run(t, nil, "kill", id)
	// A loop that outlives the exec that starts it.
	cli.ok(t, nil, "exec", id, "--", "nohup timeout 240 sh -c 'while :; do :; done' >/dev/null 2>&1 &")

	out := cli.ok(t, nil, "top", "--no-stream")
	var row []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, id+" ") {
			row = strings.Fields(line)
		}
	}
	// SANDBOX ID, TEMPLATE, STATE, CPU % ("37.5% of 2"), MEM USAGE / LIMIT
	// ("96.0 MiB / 512.0 MiB")…
	if len(row) < 11 || row[2] != "running" || !strings.HasSuffix(row[3], "%") || row[4] != "of" || row[6] == "-" || row[7] == "-" || row[8] != "/" {
		t.Fatalf("top --no-stream: no row with the sandbox's CPU and memory for %s:\n%s", id, out)
	}

	var snap struct {
		Timestamp time.Time
		Sandboxes []struct {
			SandboxID, State string
			CPUCount         int
			Metrics          *struct {
				CPUUsedPct        float64
				MemUsed, MemTotal uint64
			}
		}
	}
	out = cli.ok(t, nil, "top", "--json")
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("top --json printed %q: %v", out, err)
	}
	found := false
	for _, sb := range snap.Sandboxes {
		if sb.SandboxID != id {
			continue
		}
		found = true
		if m := sb.Metrics; sb.State != "running" || sb.CPUCount < 1 || m == nil || m.MemUsed == 0 || m.MemTotal < m.MemUsed || m.CPUUsedPct < 1 {
			t.Errorf("top --json: %s is %s with %d CPUs and metrics %+v; want it running, busy, with memory in use", id, sb.State, sb.CPUCount, m)
		}
	}
	if !found || snap.Timestamp.IsZero() {
		t.Errorf("top --json: no %s in %s", id, out)
	}
}
