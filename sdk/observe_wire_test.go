package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// TestObserveWire checks what the HTTP transport sends for a sandbox's
// metrics and logs, and how it reads E2B's answers; e2e/observe_test.go
// runs the calls against a real server.
func TestObserveWire(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	f, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "GET /sandboxes/sb1/metrics":
			writeJSON(w, http.StatusOK, []map[string]any{{
				"timestamp": at, "timestampUnix": at.Unix(), "cpuCount": 2, "cpuUsedPct": 37.5,
				"memUsed": 100, "memTotal": 1 << 30, "memCache": 7, "diskUsed": 5, "diskTotal": 10 << 30,
			}})
		case "GET /v2/sandboxes/sb1/logs":
			writeJSON(w, http.StatusOK, map[string]any{"logs": []map[string]any{
				{"timestamp": at, "level": "warn", "message": "oom: killed a process", "fields": map[string]string{"pid": "42"}},
			}})
		case "GET /v2/sandboxes/paused/logs":
			writeJSON(w, http.StatusConflict, map[string]any{"code": 409, "message": "sandbox paused is paused: its logs are back once it runs"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "sandbox not found"})
		}
	})
	c := &sdk.Client{Transport: tr}
	ctx := context.Background()

	got, err := c.Metrics(ctx, "sb1", sdk.MetricsFrom(at.Add(-time.Minute)), sdk.MetricsUntil(at.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.Metric{{Timestamp: at, CPUCount: 2, CPUUsedPct: 37.5, MemUsed: 100, MemTotal: 1 << 30, MemCache: 7, DiskUsed: 5, DiskTotal: 10 << 30}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("metrics (-want +got):\n%s", d)
	}
	if _, err := c.Metrics(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}

	logs, err := c.Logs(ctx, "sb1", sdk.LogsFrom(at), sdk.LogsBackward(), sdk.LogsLimit(5), sdk.LogsLevel("warn"), sdk.LogsSearch("oom"))
	if err != nil {
		t.Fatal(err)
	}
	wantLogs := []sdk.LogEntry{{Timestamp: at, Level: "warn", Message: "oom: killed a process", Fields: map[string]string{"pid": "42"}}}
	if d := cmp.Diff(wantLogs, logs); d != "" {
		t.Errorf("logs (-want +got):\n%s", d)
	}
	if _, err := c.Logs(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Logs(ctx, "gone"); !errdefs.IsNotFound(err) {
		t.Errorf("logs of an unknown sandbox: %v, want not found", err)
	}
	if _, err := c.Logs(ctx, "paused"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("logs of a paused sandbox: %v, want a failed precondition", err)
	}

	var queries []string
	for _, r := range f.requests() {
		queries = append(queries, r.Method+" "+r.Path+"?"+r.Query.Encode())
	}
	wantQueries := []string{
		"GET /sandboxes/sb1/metrics?" + url.Values{"start": {"1772600707"}, "end": {"1772600827"}}.Encode(),
		"GET /sandboxes/sb1/metrics?",
		"GET /v2/sandboxes/sb1/logs?" + url.Values{"cursor": {"1772600767000"}, "direction": {"backward"}, "limit": {"5"}, "level": {"warn"}, "search": {"oom"}}.Encode(),
		"GET /v2/sandboxes/sb1/logs?",
		"GET /v2/sandboxes/gone/logs?",
		"GET /v2/sandboxes/paused/logs?",
	}
	if d := cmp.Diff(wantQueries, queries); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
}

// onlyTransport is a Transport with none of the optional abilities.
type onlyTransport struct{ sdk.Transport }

func TestObserveNotSupported(t *testing.T) {
	_, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {})
	c := &sdk.Client{Transport: onlyTransport{tr}}
	if _, err := c.Metrics(context.Background(), "sb1"); !errdefs.IsNotSupported(err) {
		t.Errorf("metrics through a transport without them: %v, want not supported", err)
	}
	if _, err := c.Logs(context.Background(), "sb1"); !errdefs.IsNotSupported(err) {
		t.Errorf("logs through a transport without them: %v, want not supported", err)
	}
}
