package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// The fake backend measures from the host and keeps consoles as far as a
// test tells it to (fakeObserved): a sandbox it has nothing for answers as
// a backend that cannot.
var fakeObserved = struct {
	sync.Mutex
	stats   map[string]func() *backend.Stats
	console map[string]string
}{stats: map[string]func() *backend.Stats{}, console: map[string]string{}}

// Stats implements backend.StatsReader.
func (b *fakeBackend) Stats(ctx context.Context, id string) (*backend.Stats, error) {
	fakeObserved.Lock()
	f := fakeObserved.stats[id]
	fakeObserved.Unlock()
	if f == nil {
		return nil, fmt.Errorf("sandbox %q: the test measures nothing: %w", id, errdefs.ErrNotSupported)
	}
	return f(), nil
}

// Logs implements backend.LogReader.
func (b *fakeBackend) Logs(ctx context.Context, id string) (io.ReadCloser, error) {
	fakeObserved.Lock()
	c, ok := fakeObserved.console[id]
	fakeObserved.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return io.NopCloser(strings.NewReader(c)), nil
}

func setFakeStats(t *testing.T, id string, f func() *backend.Stats) {
	fakeObserved.Lock()
	defer fakeObserved.Unlock()
	fakeObserved.stats[id] = f
	t.Cleanup(func() {
		fakeObserved.Lock()
		defer fakeObserved.Unlock()
		delete(fakeObserved.stats, id)
	})
}

func setFakeConsole(t *testing.T, id, console string) {
	fakeObserved.Lock()
	defer fakeObserved.Unlock()
	fakeObserved.console[id] = console
	t.Cleanup(func() {
		fakeObserved.Lock()
		defer fakeObserved.Unlock()
		delete(fakeObserved.console, id)
	})
}

// withMetricsPeriod returns e served by a second Server, on the same
// engine and keys, that samples metrics every period.
func withMetricsPeriod(t *testing.T, e *testEnv, period time.Duration) *testEnv {
	t.Helper()
	srv, err := New(Config{Engine: e.engine, Keys: e.server.keys, Domain: "tupper.test", Logger: testLogger(), MetricsPeriod: period})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	out := *e
	out.server, out.http = srv, hs
	return &out
}

func (e *testEnv) metrics(id, query string) []sampleJSON {
	e.t.Helper()
	status, _, body := e.do("GET", "/sandboxes/"+id+"/metrics"+query, "")
	if status != http.StatusOK {
		e.t.Fatalf("metrics%s: %d %s", query, status, body)
	}
	var out []sampleJSON
	if err := json.Unmarshal(body, &out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *testEnv) info(id string) sandboxDetailJSON {
	e.t.Helper()
	status, _, body := e.do("GET", "/sandboxes/"+id, "")
	if status != http.StatusOK {
		e.t.Fatalf("get: %d %s", status, body)
	}
	var out sandboxDetailJSON
	if err := json.Unmarshal(body, &out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestMetricsOverTime checks that a running sandbox is sampled each
// period, that each sample gives the sizes getInfo reports (never the
// agent's view of them), the memory the backend measures and the disk
// the agent sees, and that a killed sandbox's samples go.
func TestMetricsOverTime(t *testing.T) {
	e := withMetricsPeriod(t, newTestEnv(t), 20*time.Millisecond)
	sb := e.create(`{"cpuCount": 2, "memoryMB": 512}`)
	id := sb.SandboxID
	setFakeStats(t, id, func() *backend.Stats {
		return &backend.Stats{CPUUsageNanos: 1, MemoryUsageBytes: 96 << 20, MemoryLimitBytes: 512 << 20, Pids: 3}
	})
	var got []sampleJSON
	testutil.WaitFor(t, 10*time.Second, "three samples", func() bool {
		got = e.metrics(id, "")
		return len(got) >= 3
	})
	info := e.info(id)
	for i, m := range got {
		if i > 0 && !m.Timestamp.After(got[i-1].Timestamp) {
			t.Errorf("sample %d at %v, not after the one before at %v", i, m.Timestamp, got[i-1].Timestamp)
		}
		if m.TimestampUnix != m.Timestamp.Unix() {
			t.Errorf("sample %d: timestampUnix %d, timestamp %v", i, m.TimestampUnix, m.Timestamp)
		}
	}
	last := got[len(got)-1]
	want := sampleJSON{metricJSON: metricJSON{
		Timestamp: last.Timestamp, TimestampUnix: last.TimestampUnix, CPUUsedPct: last.CPUUsedPct,
		CPUCount: info.CPUCount, MemTotal: uint64(info.MemoryMB) << 20, DiskTotal: uint64(info.DiskSizeMB) << 20,
		MemUsed: 96 << 20, DiskUsed: 5 << 20,
	}}
	if d := cmp.Diff(want, last, cmp.AllowUnexported(sampleJSON{})); d != "" {
		t.Errorf("last sample (-want +got):\n%s", d)
	}
	if info.CPUCount != 2 || info.MemoryMB != 512 {
		t.Errorf("getInfo: %d CPUs, %d MB; want what create asked", info.CPUCount, info.MemoryMB)
	}

	// A window: the samples within it alone, and none taken afresh for
	// one that ended long ago.
	from := got[1].TimestampUnix
	for _, m := range e.metrics(id, fmt.Sprintf("?start=%d", from+1)) {
		if m.TimestampUnix < from+1 {
			t.Errorf("sample at %d in a window from %d", m.TimestampUnix, from+1)
		}
	}
	if old := e.metrics(id, "?start=1&end=2"); len(old) != 0 {
		t.Errorf("a window that ended long ago holds %d samples", len(old))
	}
	if status, _, body := e.do("GET", "/sandboxes/"+id+"/metrics?start=yesterday", ""); status != http.StatusBadRequest {
		t.Errorf("start=yesterday: %d %s", status, body)
	}

	if status, _, body := e.do("DELETE", "/sandboxes/"+id, ""); status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", status, body)
	}
	if status, _, body := e.do("GET", "/sandboxes/"+id+"/metrics", ""); status != http.StatusNotFound {
		t.Errorf("metrics of a killed sandbox: %d %s", status, body)
	}
	testutil.WaitFor(t, 10*time.Second, "the killed sandbox's samples to go", func() bool {
		e.server.sampler.mu.Lock()
		defer e.server.sampler.mu.Unlock()
		_, ok := e.server.sampler.histories[id]
		return !ok
	})
}

// TestMetricsCPUShare checks CPU use: the backend's CPU time between two
// readings as a share of the sandbox's CPUs, or, without a backend that
// measures, the agent's share of the CPUs it sees (the fake agent's 12.5%
// of 2) as a share of the sandbox's.
func TestMetricsCPUShare(t *testing.T) {
	e := withMetricsPeriod(t, newTestEnv(t), time.Hour)
	ctx := context.Background()
	sb := e.create(`{"cpuCount": 2}`)
	rec, err := e.engine.Get(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	h := &metricsHistory{size: 10}
	m, err := e.server.takeSample(ctx, rec, h)
	if err != nil {
		t.Fatal(err)
	}
	if m.cpuUsedPct != 12.5 {
		t.Errorf("without backend stats: %v%%, want the agent's 12.5%% of 2 CPUs as a share of 2", m.cpuUsedPct)
	}
	setFakeStats(t, sb.SandboxID, func() *backend.Stats { return &backend.Stats{CPUUsageNanos: 11e9} })
	// One CPU busy for the last ten seconds, of two.
	h.cpuAt, h.cpuNanos = time.Now().Add(-10*time.Second), 1e9
	if m, err = e.server.takeSample(ctx, rec, h); err != nil {
		t.Fatal(err)
	}
	if m.cpuUsedPct < 49.5 || m.cpuUsedPct > 50 {
		t.Errorf("one CPU of two busy: %v%%, want 50%%", m.cpuUsedPct)
	}
	// A counter that went back (a resume) is measured afresh, over a
	// moment: an idle sandbox, whatever the agent says.
	h.cpuNanos = 20e9
	if m, err = e.server.takeSample(ctx, rec, h); err != nil {
		t.Fatal(err)
	}
	if m.cpuUsedPct != 0 || h.cpuNanos != 11e9 {
		t.Errorf("after the counter went back: %v%%, reading %d; want 0%% and 11e9", m.cpuUsedPct, h.cpuNanos)
	}
	// So is a first sample.
	fresh := &metricsHistory{size: 10}
	if m, err = e.server.takeSample(ctx, rec, fresh); err != nil {
		t.Fatal(err)
	}
	if m.cpuUsedPct != 0 || fresh.cpuNanos != 11e9 {
		t.Errorf("a first sample of an idle sandbox: %v%%, reading %d; want 0%% and 11e9", m.cpuUsedPct, fresh.cpuNanos)
	}
}

// TestMetricsOfDeadAgent checks that a sandbox whose agent does not answer,
// and which has no samples yet, is a clear error rather than a hang or an
// empty series.
func TestMetricsOfDeadAgent(t *testing.T) {
	e := withMetricsPeriod(t, newTestEnv(t), time.Hour)
	sb := e.create(`{}`)
	if got := e.metrics(sb.SandboxID, ""); len(got) != 1 {
		t.Fatalf("a fresh sandbox's metrics: %d samples, want the one taken for the request", len(got))
	}
	other := e.create(`{}`)
	e.backend.crash(other.SandboxID)
	status, _, body := e.do("GET", "/sandboxes/"+other.SandboxID+"/metrics", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "metrics") {
		t.Errorf("metrics of a dead agent: %d %s", status, body)
	}
	// The sandbox whose agent died after a sample keeps its history.
	e.backend.crash(sb.SandboxID)
	if got := e.metrics(sb.SandboxID, ""); len(got) != 1 {
		t.Errorf("after its agent died: %d samples, want the one taken before", len(got))
	}
}

// TestLogs reads a console through both of E2B's log routes.
func TestLogs(t *testing.T) {
	e := newTestEnv(t)
	sb := e.create(`{}`)
	rec, err := e.engine.Get(context.Background(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's records come after the sandbox's start, a second apart.
	t0 := rec.StartedAt.UTC()
	base := t0.Truncate(time.Second).Add(time.Second)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	stamp := func(d time.Duration) string { return at(d).Format("2006-01-02T15:04:05.000Z07:00") }
	setFakeConsole(t, sb.SandboxID, strings.Join([]string{
		"runtime says hello",
		`time=` + stamp(0) + ` level=INFO msg="agent serving" addr=[::]:49983 pid=1`,
		`time=` + stamp(time.Second) + ` level=DEBUG msg=tick`,
		`time=` + stamp(2*time.Second) + ` level=INFO msg="start-cmd: listening on 8080" stream=stdout`,
		"a line of its own",
		`time=` + stamp(3500*time.Millisecond) + ` level=WARN msg="oom: killed a process" component=oom pid=42`,
		`time=` + stamp(4*time.Second) + ` level=ERROR+2 msg="start command failed" err="exit status 1"`,
	}, "\n")+"\n")
	all := []sandboxLogEntryJSON{
		{Timestamp: t0, Level: "info", Message: "runtime says hello", Fields: map[string]string{}},
		{Timestamp: at(0), Level: "info", Message: "agent serving", Fields: map[string]string{"addr": "[::]:49983", "pid": "1"}},
		{Timestamp: at(time.Second), Level: "debug", Message: "tick", Fields: map[string]string{}},
		{Timestamp: at(2 * time.Second), Level: "info", Message: "start-cmd: listening on 8080", Fields: map[string]string{"stream": "stdout"}},
		{Timestamp: at(2 * time.Second), Level: "info", Message: "a line of its own", Fields: map[string]string{}},
		{Timestamp: at(3500 * time.Millisecond), Level: "warn", Message: "oom: killed a process", Fields: map[string]string{"component": "oom", "pid": "42"}},
		{Timestamp: at(4 * time.Second), Level: "error", Message: "start command failed", Fields: map[string]string{"err": "exit status 1"}},
	}

	type v1 struct {
		Logs       []sandboxLogJSON      `json:"logs"`
		LogEntries []sandboxLogEntryJSON `json:"logEntries"`
	}
	get := func(path string, out any) {
		t.Helper()
		status, _, body := e.do("GET", path, "")
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, status, body)
		}
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	v1path := "/sandboxes/" + sb.SandboxID + "/logs"
	var got v1
	get(v1path, &got)
	if d := cmp.Diff(all, got.LogEntries); d != "" {
		t.Errorf("v1 entries (-want +got):\n%s", d)
	}
	// Each line is the JSON object @e2b/cli parses for its level and
	// logger.
	if len(got.Logs) != len(all) {
		t.Fatalf("v1 logs: %d lines, want %d", len(got.Logs), len(all))
	}
	var oom map[string]string
	if err := json.Unmarshal([]byte(got.Logs[5].Line), &oom); err != nil {
		t.Fatalf("line %q: %v", got.Logs[5].Line, err)
	}
	wantOOM := map[string]string{"level": "warn", "logger": "oom", "message": "oom: killed a process", "component": "oom", "pid": "42"}
	if d := cmp.Diff(wantOOM, oom); d != "" || !got.Logs[5].Timestamp.Equal(all[5].Timestamp) {
		t.Errorf("v1 line at %v (-want +got):\n%s", got.Logs[5].Timestamp, d)
	}
	var first map[string]string
	json.Unmarshal([]byte(got.Logs[0].Line), &first)
	if first["logger"] != "agent" || first["message"] != "runtime says hello" {
		t.Errorf("v1 line of a plain line: %q", got.Logs[0].Line)
	}
	// start (ms) and limit, as the CLI's --follow asks for what came
	// after the last line it printed.
	var after v1
	get(fmt.Sprintf("%s?start=%d&limit=2", v1path, all[3].Timestamp.UnixMilli()+1), &after)
	if d := cmp.Diff(all[5:7], after.LogEntries); d != "" {
		t.Errorf("v1 from a start, 2 at most (-want +got):\n%s", d)
	}

	type v2 struct {
		Logs []sandboxLogEntryJSON `json:"logs"`
	}
	base2 := "/v2/sandboxes/" + sb.SandboxID + "/logs"
	for _, tt := range []struct {
		name, query string
		want        []sandboxLogEntryJSON
	}{
		{name: "all", query: "", want: all},
		{name: "level", query: "?level=warn", want: all[5:]},
		{name: "level upper case", query: "?level=INFO", want: []sandboxLogEntryJSON{all[0], all[1], all[3], all[4], all[5], all[6]}},
		{name: "search", query: "?search=start", want: []sandboxLogEntryJSON{all[3], all[6]}},
		{name: "search is case-sensitive", query: "?search=START", want: []sandboxLogEntryJSON{}},
		{name: "forward from a cursor", query: fmt.Sprintf("?cursor=%d&limit=2", all[2].Timestamp.UnixMilli()), want: all[2:4]},
		{name: "backward", query: "?direction=backward&limit=2", want: []sandboxLogEntryJSON{all[6], all[5]}},
		{name: "backward from a cursor", query: fmt.Sprintf("?direction=backward&cursor=%d", all[2].Timestamp.UnixMilli()),
			want: []sandboxLogEntryJSON{all[2], all[1], all[0]}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got v2
			get(base2+tt.query, &got)
			if d := cmp.Diff(tt.want, got.Logs); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}

	for _, q := range []string{"?level=loud", "?direction=sideways", "?limit=-1", "?cursor=noon"} {
		if status, _, body := e.do("GET", base2+q, ""); status != http.StatusBadRequest {
			t.Errorf("v2%s: %d %s, want 400", q, status, body)
		}
	}
	if status, _, body := e.do("GET", v1path+"?start=noon", ""); status != http.StatusBadRequest {
		t.Errorf("v1?start=noon: %d %s, want 400", status, body)
	}
	if status, _, body := e.do("GET", "/sandboxes/nosuchsandbox/logs", ""); status != http.StatusNotFound {
		t.Errorf("logs of an unknown sandbox: %d %s", status, body)
	}
	// Another team's key sees no logs of this sandbox.
	otherKey, _, err := e.server.keys.CreateInTeam(context.Background(), "other", "other")
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := e.doKey(otherKey, "GET", base2, ""); status != http.StatusNotFound {
		t.Errorf("logs through another team's key: %d %s", status, body)
	}
}
