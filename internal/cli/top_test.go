package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeTopAPI serves the list of sandboxes and GET /sandboxes/metrics as
// `tupper serve` does, and notes the ids metrics were asked for.
type fakeTopAPI struct {
	started time.Time
	mu      sync.Mutex
	asked   []string
}

func (f *fakeTopAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v2/sandboxes":
		sb := func(id, state string, started time.Time) map[string]any {
			return map[string]any{
				"sandboxID": id, "templateID": "base", "clientID": "c", "envdVersion": "0.5.7", "state": state,
				"startedAt": started, "endAt": started.Add(time.Hour), "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 2048,
			}
		}
		json.NewEncoder(w).Encode([]map[string]any{
			sb("sb-late", "running", f.started.Add(time.Minute)),
			sb("sb-early", "running", f.started),
			sb("sb-paused", "paused", f.started.Add(2*time.Minute)),
		})
	case "/sandboxes/metrics":
		f.mu.Lock()
		f.asked = append(f.asked, r.URL.Query().Get("sandbox_ids"))
		f.mu.Unlock()
		m := map[string]any{"timestamp": f.started.Add(3 * time.Minute), "cpuCount": 2, "cpuUsedPct": 37.5, "memUsed": 128 << 20, "memTotal": 512 << 20, "diskUsed": 5 << 20, "diskTotal": 2 << 30}
		json.NewEncoder(w).Encode(map[string]any{"sandboxes": map[string]any{"sb-early": m, "sb-late": m}})
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]any{"code": 404, "message": "no such endpoint"})
	}
}

func TestTop(t *testing.T) {
	clearAPIEnv(t)
	f := &fakeTopAPI{started: time.Now().Add(-time.Hour).UTC().Truncate(time.Second)}
	srv := httptest.NewServer(f)
	defer srv.Close()
	api := apiOptions{url: srv.URL, key: "e2b_good"}

	// Not a terminal: one snapshot, without --no-stream.
	var stdout bytes.Buffer
	if err := runTop(context.Background(), &globals{stdout: &stdout}, &topOptions{api: api, interval: time.Second}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table %q: want a header and three sandboxes", stdout.String())
	}
	for i, want := range [][]string{
		{"SANDBOX ID", "CPU %", "MEM USAGE / LIMIT", "MEM %", "DISK USAGE / LIMIT", "AGE", "ENDS IN"},
		{"sb-early", "base", "running", "37.5% of 2", "128.0 MiB / 512.0 MiB", "25.0%", "5.0 MiB / 2.0 GiB", "1h"},
		{"sb-late", "running", "37.5% of 2", "59m"},
		{"sb-paused", "paused", "-"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if d := cmp.Diff([]string{"sb-late,sb-early,sb-paused"}, f.asked); d != "" {
		t.Errorf("metrics asked for (-want +got):\n%s", d)
	}

	// --json, streamed: one object a line, each snapshot whole.
	stdout.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelAfter{w: &stdout, lines: 2, cancel: cancel}
	if err := runTop(ctx, &globals{stdout: w}, &topOptions{api: api, json: true, stream: true, interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var snap topSnapshot
		if err := json.Unmarshal([]byte(line), &snap); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		if len(snap.Sandboxes) != 3 || snap.Sandboxes[0].SandboxID != "sb-early" || snap.Sandboxes[2].Metrics != nil {
			t.Errorf("snapshot %+v: want three sandboxes, oldest first, the paused one without metrics", snap)
		}
		if m := snap.Sandboxes[0].Metrics; m == nil || m.CPUUsedPct != 37.5 || m.MemUsed != 128<<20 || m.MemTotal != 512<<20 {
			t.Errorf("sb-early's metrics %+v", m)
		}
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2 {
		t.Errorf("%d snapshots, want the two before the stop", n)
	}

	if err := runTop(context.Background(), &globals{stdout: &stdout}, &topOptions{api: api, stream: true, noStream: true, interval: time.Second}); err == nil {
		t.Error("--stream with --no-stream: no error")
	}
}

// cancelAfter passes writes on, and cancels once lines lines went by.
type cancelAfter struct {
	w      *bytes.Buffer
	lines  int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	if strings.Count(c.w.String(), "\n") >= c.lines {
		c.cancel()
	}
	return n, err
}
