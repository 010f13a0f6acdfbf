package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// TestLatestMetricsWire checks GET /sandboxes/metrics: the ids
// comma-separated, a hundred a call, and E2B's answer read by id.
func TestLatestMetricsWire(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var batches []int
	_, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method+" "+r.URL.Path != "GET /sandboxes/metrics" {
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "no such endpoint"})
			return
		}
		ids := strings.Split(r.URL.Query().Get("sandbox_ids"), ",")
		batches = append(batches, len(ids))
		out := map[string]any{}
		for _, id := range ids {
			if id != "sb7" { // sb7 has no sample yet
				out[id] = map[string]any{"timestamp": at, "timestampUnix": at.Unix(), "cpuCount": 2, "cpuUsedPct": 12.5, "memUsed": 100, "memTotal": 1 << 30, "diskUsed": 5, "diskTotal": 10 << 30}
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
	})
	ids := make([]string, 150)
	for i := range ids {
		ids[i] = fmt.Sprintf("sb%d", i)
	}
	got, err := (&sdk.Client{Transport: tr}).LatestMetrics(context.Background(), ids...)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{100, 50}, batches); d != "" {
		t.Errorf("sandboxes per request (-want +got):\n%s", d)
	}
	if _, ok := got["sb7"]; len(got) != 149 || ok {
		t.Errorf("%d sandboxes with a sample (sb7's: %v), want 149 without sb7", len(got), ok)
	}
	want := sdk.Metric{Timestamp: at, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 100, MemTotal: 1 << 30, DiskUsed: 5, DiskTotal: 10 << 30}
	if d := cmp.Diff(want, got["sb149"]); d != "" {
		t.Errorf("sb149 (-want +got):\n%s", d)
	}
}

// metricsOnly is a transport that keeps metrics but cannot tell many
// sandboxes' at once.
type metricsOnly struct {
	sdk.Transport
	samples map[string][]sdk.Metric
}

func (m metricsOnly) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]sdk.Metric, error) {
	list, ok := m.samples[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return list, nil
}

// TestLatestMetricsOneByOne checks LatestMetrics over a transport without
// LatestMetricsTransport: each sandbox's newest sample, none for one that
// has none or is gone.
func TestLatestMetricsOneByOne(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tr := metricsOnly{samples: map[string][]sdk.Metric{
		"a":     {{Timestamp: at, MemUsed: 1}, {Timestamp: at.Add(time.Second), MemUsed: 2}},
		"fresh": nil,
	}}
	got, err := (&sdk.Client{Transport: tr}).LatestMetrics(context.Background(), "a", "fresh", "gone")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]sdk.Metric{"a": {Timestamp: at.Add(time.Second), MemUsed: 2}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("latest (-want +got):\n%s", d)
	}
}
