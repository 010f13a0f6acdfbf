package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/agent/status"
)

func newServer(t *testing.T, cfg status.Config) string {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h := status.New(cfg)
	mux := http.NewServeMux()
	for _, p := range []string{"/health", "/envs", "/metrics"} {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, method, url string) (*http.Response, []byte) {
	t.Helper()
	r, _ := http.NewRequest(method, url, nil)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func TestRoutes(t *testing.T) {
	base := newServer(t, status.Config{Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "EMPTY=", "NOEQUALS", "DUP=1", "DUP=2", "EQ=a=b"}})
	tests := []struct {
		name, method, path string
		status             int
		contentType        string
	}{
		{"health", "GET", "/health", http.StatusNoContent, ""},
		{"health head", "HEAD", "/health", http.StatusNoContent, ""},
		{"envs", "GET", "/envs", http.StatusOK, "application/json"},
		{"metrics", "GET", "/metrics", http.StatusOK, "application/json"},
		{"post health", "POST", "/health", http.StatusMethodNotAllowed, "application/json"},
		{"delete envs", "DELETE", "/envs", http.StatusMethodNotAllowed, "application/json"},
		{"put metrics", "PUT", "/metrics", http.StatusMethodNotAllowed, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := get(t, tt.method, base+tt.path)
			if res.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d; %s", res.StatusCode, tt.status, body)
			}
			if got := res.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if tt.status == http.StatusNoContent && len(body) != 0 {
				t.Errorf("204 with a body: %q", body)
			}
			if tt.status == http.StatusMethodNotAllowed && res.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	t.Run("envs content", func(t *testing.T) {
		_, body := get(t, "GET", base+"/envs")
		var got map[string]string
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "EMPTY": "", "DUP": "2", "EQ": "a=b"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("envs mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("no env is an empty object", func(t *testing.T) {
		_, body := get(t, "GET", newServer(t, status.Config{})+"/envs")
		if string(body) != "{}\n" {
			t.Errorf("body = %q, want {}", body)
		}
	})
}

func TestMetrics(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("metrics come from /proc")
	}
	base := newServer(t, status.Config{})
	for i := range 3 { // the first call and later ones take different paths
		res, body := get(t, "GET", base+"/metrics")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("call %d: status %d: %s", i, res.StatusCode, body)
		}
		// Every field the SDKs read must be present.
		var raw map[string]json.Number
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("field %q missing from %s", k, body)
			}
		}
		var m status.Metrics
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			name string
			ok   bool
		}{
			{"ts is now", time.Since(time.Unix(m.Timestamp, 0)).Abs() < time.Minute},
			{"cpu_count is NumCPU", m.CPUCount == runtime.NumCPU()},
			{"cpu_used_pct in [0,100]", m.CPUUsedPct >= 0 && m.CPUUsedPct <= 100},
			{"some memory", m.MemTotal > 16<<20},
			{"used memory within total", m.MemUsed > 0 && m.MemUsed <= m.MemTotal},
			{"MiB agree with bytes", m.MemTotalMiB == m.MemTotal>>20 && m.MemUsedMiB == m.MemUsed>>20},
			{"some disk", m.DiskTotal > 0},
			{"used disk within total", m.DiskUsed > 0 && m.DiskUsed <= m.DiskTotal},
		}
		for _, c := range checks {
			if !c.ok {
				t.Errorf("call %d: %s fails: %+v", i, c.name, m)
			}
		}
	}
}

func TestMetricsSeesCPULoad(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("metrics come from /proc")
	}
	base := newServer(t, status.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range runtime.NumCPU() {
		go func() {
			for ctx.Err() == nil {
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	_, body := get(t, "GET", base+"/metrics")
	var m status.Metrics
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	// Every CPU is spinning, so well over a fifth of the machine is busy
	// however loaded it was before.
	if m.CPUUsedPct < 20 {
		t.Errorf("cpu_used_pct = %v with every CPU busy", m.CPUUsedPct)
	}
}
