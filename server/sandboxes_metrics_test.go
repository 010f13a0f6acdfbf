package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
)

// latestMetrics asks GET /sandboxes/metrics?query through key.
func (e *testEnv) latestMetrics(key, query string) map[string]sampleJSON {
	e.t.Helper()
	status, _, body := e.doKey(key, "GET", "/sandboxes/metrics?"+query, "")
	if status != http.StatusOK {
		e.t.Fatalf("GET /sandboxes/metrics?%s: %d %s", query, status, body)
	}
	var out struct {
		Sandboxes map[string]sampleJSON `json:"sandboxes"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		e.t.Fatalf("%s: %v", body, err)
	}
	return out.Sandboxes
}

// TestLatestMetrics checks E2B's GET /sandboxes/metrics: the newest sample
// of each sandbox named, comma-separated or repeated, taken for the
// request when there is none newer than the period; nothing for ids the
// team does not have; 400 without ids or with too many.
func TestLatestMetrics(t *testing.T) {
	e := withMetricsPeriod(t, newTestEnv(t), time.Hour)
	a, b, c := e.create(`{"cpuCount": 2, "memoryMB": 512}`), e.create(`{}`), e.create(`{}`)
	setFakeStats(t, a.SandboxID, func() *backend.Stats {
		return &backend.Stats{CPUUsageNanos: 1, MemoryUsageBytes: 96 << 20, MemoryLimitBytes: 512 << 20}
	})
	// c has a sample already, newer than the (hour-long) period.
	before := e.metrics(c.SandboxID, "")

	got := e.latestMetrics(e.key, "sandbox_ids="+a.SandboxID+","+c.SandboxID+"&sandbox_ids="+b.SandboxID+",nosuchsandbox,"+a.SandboxID)
	if len(got) != 3 {
		t.Fatalf("%d sandboxes answered, want a, b and c: %v", len(got), got)
	}
	if m := got[a.SandboxID]; m.MemUsed != 96<<20 || m.MemTotal != 512<<20 || m.CPUCount != 2 || m.Timestamp.IsZero() {
		t.Errorf("a's sample %+v, want 96 MiB of 512 MiB, 2 CPUs, a time", m)
	}
	if m := got[c.SandboxID]; !m.Timestamp.Equal(before[len(before)-1].Timestamp) {
		t.Errorf("c's sample from %v, want the one it had, from %v", m.Timestamp, before[len(before)-1].Timestamp)
	}
	// The samples taken for the request are in the sandboxes' histories.
	if n := len(e.metrics(b.SandboxID, "")); n != 1 {
		t.Errorf("b has %d samples after the request, want the one it took", n)
	}

	otherKey, _, err := e.server.keys.CreateInTeam(context.Background(), "other", "other")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.latestMetrics(otherKey, "sandbox_ids="+a.SandboxID); len(got) != 0 {
		t.Errorf("another team's key sees %v", got)
	}

	many := make([]string, maxLatestMetrics+1)
	for i := range many {
		many[i] = fmt.Sprintf("sb%d", i)
	}
	for _, q := range []string{"", "sandbox_ids=", "sandbox_ids=" + strings.Join(many, ",")} {
		if status, _, body := e.do("GET", "/sandboxes/metrics?"+q, ""); status != http.StatusBadRequest {
			t.Errorf("?%.40s: %d %s, want 400", q, status, body)
		}
	}
}
