package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeLogAPI serves GET /v2/sandboxes/sb1/logs from entries as
// `tupper serve` does (cursor, direction, limit), and grows the log by
// next after each read; once next is empty, the sandbox is gone.
type fakeLogAPI struct {
	mu      sync.Mutex
	entries []map[string]any
	next    [][]map[string]any
	queries []string
	// paused is how many reads after the first answer 409, as for a
	// paused sandbox.
	paused int
}

func (f *fakeLogAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/v2/sandboxes/sb1/logs" || f.entries == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"code":404,"message":"sandbox \"sb1\": not found"}`)
		return
	}
	if len(f.queries) > 0 && f.paused > 0 {
		f.paused--
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"code":409,"message":"sandbox \"sb1\" is paused: its logs are back once it runs"}`)
		return
	}
	q := r.URL.Query()
	f.queries = append(f.queries, q.Encode())
	var out []map[string]any
	cursor, _ := strconv.ParseInt(q.Get("cursor"), 10, 64)
	limit, _ := strconv.Atoi(q.Get("limit"))
	list := slices.Clone(f.entries)
	if q.Get("direction") == "backward" {
		slices.Reverse(list)
	}
	for _, e := range list {
		if ts := e["timestamp"].(time.Time); cursor == 0 || ts.UnixMilli() >= cursor {
			out = append(out, e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	json.NewEncoder(w).Encode(map[string]any{"logs": out})
	if len(f.next) > 0 {
		f.entries = append(f.entries, f.next[0]...)
		f.next = f.next[1:]
	} else {
		f.entries = nil
	}
}

func TestLogsCommand(t *testing.T) {
	clearAPIEnv(t)
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	entry := func(ms int, level, msg string, fields map[string]string) map[string]any {
		return map[string]any{"timestamp": t0.Add(time.Duration(ms) * time.Millisecond), "level": level, "message": msg, "fields": fields}
	}
	line := func(ms int, rest string) string {
		return t0.Add(time.Duration(ms)*time.Millisecond).Local().Format("2006-01-02T15:04:05.000Z07:00") + " " + rest
	}
	first := []map[string]any{
		entry(0, "info", "agent serving", map[string]string{"addr": "[::]:49983", "pid": "1"}),
		entry(500, "warn", "start-cmd: it said so", map[string]string{"stream": "stderr", "note": "a b"}),
	}
	// Logged after the first read: one more line in the same
	// millisecond as the last one printed, and one later.
	later := []map[string]any{
		entry(500, "info", "same millisecond", nil),
		entry(900, "error", "bye", map[string]string{}),
	}
	tests := []struct {
		name    string
		opts    logsOptions
		paused  int
		want    []string
		queries []string
	}{
		{
			name: "all", opts: logsOptions{},
			want: []string{
				line(0, "INFO  agent serving addr=[::]:49983 pid=1"),
				line(500, `WARN  start-cmd: it said so note="a b" stream=stderr`),
			},
			queries: []string{""},
		},
		{
			name: "tail", opts: logsOptions{tail: 1, level: "warn"},
			want:    []string{line(500, `WARN  start-cmd: it said so note="a b" stream=stderr`)},
			queries: []string{"direction=backward&level=warn&limit=1"},
		},
		{
			name: "follow", opts: logsOptions{follow: true, poll: time.Millisecond}, paused: 2,
			want: []string{
				line(0, "INFO  agent serving addr=[::]:49983 pid=1"),
				line(500, `WARN  start-cmd: it said so note="a b" stream=stderr`),
				line(500, "INFO  same millisecond"),
				line(900, "ERROR bye"),
			},
			queries: []string{"", fmt.Sprintf("cursor=%d&limit=1000", t0.Add(500*time.Millisecond).UnixMilli())},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLogAPI{entries: slices.Clone(first), next: [][]map[string]any{later}, paused: tt.paused}
			srv := httptest.NewServer(f)
			defer srv.Close()
			var stdout bytes.Buffer
			o := tt.opts
			o.api, o.id = apiOptions{url: srv.URL, key: "e2b_good"}, "sb1"
			if err := runLogs(context.Background(), &globals{stdout: &stdout}, &o); err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("output (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.queries, f.queries); d != "" {
				t.Errorf("queries (-want +got):\n%s", d)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		srv := httptest.NewServer(&fakeLogAPI{entries: later})
		defer srv.Close()
		var stdout bytes.Buffer
		o := logsOptions{api: apiOptions{url: srv.URL, key: "e2b_good"}, id: "sb1", json: true}
		if err := runLogs(context.Background(), &globals{stdout: &stdout}, &o); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"fields":{},"level":"info","message":"same millisecond","timestamp":%q}`+"\n"+
			`{"fields":{},"level":"error","message":"bye","timestamp":%q}`+"\n",
			t0.Add(500*time.Millisecond).Format(time.RFC3339Nano), t0.Add(900*time.Millisecond).Format(time.RFC3339Nano))
		if stdout.String() != want {
			t.Errorf("--json printed\n%s\nwant\n%s", stdout.String(), want)
		}
	})

	t.Run("unknown sandbox", func(t *testing.T) {
		srv := httptest.NewServer(&fakeLogAPI{})
		defer srv.Close()
		o := logsOptions{api: apiOptions{url: srv.URL, key: "e2b_good"}, id: "sb1"}
		err := runLogs(context.Background(), &globals{stdout: &bytes.Buffer{}}, &o)
		if err == nil || !strings.Contains(err.Error(), "sandbox sb1 not found: run `tupper ls`") {
			t.Errorf("logs of an unknown sandbox: %v", err)
		}
	})
}
