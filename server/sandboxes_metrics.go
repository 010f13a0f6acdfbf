package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// sampleJSON is one sample of GET /sandboxes/{id}/metrics, E2B's
// SandboxMetric.
type sampleJSON struct {
	metricJSON
	MemCache uint64 `json:"memCache"`
}

// handleMetrics serves GET /sandboxes/{id}/metrics?start&end: the samples
// of the sandbox's resource use taken within [start, end] (Unix seconds,
// each optional), oldest first. When none is newer than the sampling
// period and now lies in the window, a sample is taken first; a sandbox
// whose sample fails with nothing to show answers 503.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	start, end, err := metricsWindow(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.lookup(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	h := s.sampler.history(id)
	var fresh error
	if now := time.Now().Unix(); sb.State == store.StateRunning && (start == 0 || now >= start) && (end == 0 || now <= end) {
		fresh = s.refreshSample(r.Context(), sb, h)
	}
	samples := h.window(start, end)
	if len(samples) == 0 && fresh != nil {
		s.writeError(w, r, fresh)
		return
	}
	out := make([]sampleJSON, 0, len(samples))
	for _, m := range samples {
		out = append(out, m.json())
	}
	writeJSON(w, http.StatusOK, out)
}

// json returns m as the API shows it.
func (m metricSample) json() sampleJSON {
	return sampleJSON{
		metricJSON: metricJSON{
			Timestamp: m.at, TimestampUnix: m.at.Unix(), CPUCount: m.cpuCount, CPUUsedPct: m.cpuUsedPct,
			MemUsed: m.memUsed, MemTotal: m.memTotal, DiskUsed: m.diskUsed, DiskTotal: m.diskTotal,
		},
		MemCache: m.memCache,
	}
}

// maxLatestMetrics is the most sandboxes one GET /sandboxes/metrics asks
// about, as a page of the list holds.
const maxLatestMetrics = 100

// handleLatestMetrics serves GET /sandboxes/metrics?sandbox_ids=a,b (the
// ids also as repeated parameters): E2B's SandboxesWithMetrics, the newest
// sample of each sandbox named, by id. A running sandbox with no sample
// newer than the sampling period is sampled first, as for handleMetrics; a
// paused one shows its last. Ids of sandboxes the caller's team does not
// have, and sandboxes with no sample to show, are left out.
func (s *Server) handleLatestMetrics(w http.ResponseWriter, r *http.Request) {
	ids, err := sandboxIDsParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, samplerParallel)
		out = make(map[string]sampleJSON, len(ids))
	)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := s.lookup(r.Context(), id)
			if err != nil {
				return
			}
			h := s.sampler.history(id)
			if sb.State == store.StateRunning {
				if err := s.refreshSample(r.Context(), sb, h); err != nil {
					s.log.Debug("metrics sample", "sandbox", id, "err", err)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.samples) == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out[id] = h.samples[len(h.samples)-1].json()
		})
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, struct {
		Sandboxes map[string]sampleJSON `json:"sandboxes"`
	}{out})
}

// sandboxIDsParam reads the sandbox_ids of a query: comma-separated, as
// E2B's SDKs send an array, or repeated; at least one and at most
// maxLatestMetrics, each once.
func sandboxIDsParam(r *http.Request) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	switch {
	case len(ids) == 0:
		return nil, fmt.Errorf("sandbox_ids: name the sandboxes, comma-separated: %w", errdefs.ErrInvalidArgument)
	case len(ids) > maxLatestMetrics:
		return nil, fmt.Errorf("sandbox_ids: %d sandboxes, at most %d at once: %w", len(ids), maxLatestMetrics, errdefs.ErrInvalidArgument)
	}
	return ids, nil
}

// refreshSample adds a sample of sb to h unless h has one newer than the
// sampling period.
func (s *Server) refreshSample(ctx context.Context, sb *engine.Sandbox, h *metricsHistory) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.newest()) < s.sampler.period {
		return nil
	}
	m, err := s.takeSample(ctx, sb, h)
	if err != nil {
		return err
	}
	h.add(m)
	return nil
}

// firstCPUWindow is the shortest time CPU use is measured over, between
// the two readings of a sample that has no earlier reading to go from.
const firstCPUWindow = 100 * time.Millisecond

// takeSample measures running sandbox sb now. The sizes it is allowed
// (CPUs, memory, disk) are its record's, as getInfo reports them. CPU
// and memory in use come from the backend's view from the host, where it
// has one; the disk in use, which only the inside knows, from the agent.
// CPU use is the backend's CPU time since h's previous reading of it (or,
// for the first, since a reading firstCPUWindow before), as a share of the
// sandbox's CPUs; without backend stats, the agent's measure scaled to
// those CPUs (inside runc, the agent's view is the host's). h.mu must be
// held.
func (s *Server) takeSample(ctx context.Context, sb *engine.Sandbox, h *metricsHistory) (metricSample, error) {
	am, err := s.agentMetrics(ctx, sb)
	if err != nil {
		return metricSample{}, err
	}
	st, err := s.engine.Stats(ctx, sb.ID)
	if err == nil && (h.cpuAt.IsZero() || st.CPUUsageNanos < h.cpuNanos) {
		// Nothing to measure from (a first sample, or a counter that went
		// back: a new boot, as a resume is): a second reading a moment
		// later is.
		h.cpuAt, h.cpuNanos = time.Now().UTC(), st.CPUUsageNanos
		select {
		case <-ctx.Done():
			return metricSample{}, ctx.Err()
		case <-time.After(firstCPUWindow):
		}
		st, err = s.engine.Stats(ctx, sb.ID)
	}
	now := time.Now().UTC()
	m := metricSample{
		at:       now,
		cpuCount: listedJSON(sb).CPUCount,
		memTotal: uint64(sb.MemoryMB) << 20, diskTotal: uint64(sb.DiskMB) << 20,
		memUsed: am.MemUsed, diskUsed: am.DiskUsed,
	}
	// The agent's share is of the CPUs it sees, which may be the host's.
	m.cpuUsedPct = am.CPUUsedPct * float64(max(am.CPUCount, 1)) / float64(m.cpuCount)
	switch {
	case err == nil:
		m.memUsed = st.MemoryUsageBytes
		m.cpuUsedPct = 0
		if st.CPUUsageNanos >= h.cpuNanos && now.After(h.cpuAt) {
			used := float64(st.CPUUsageNanos - h.cpuNanos)
			m.cpuUsedPct = 100 * used / (float64(now.Sub(h.cpuAt)) * float64(m.cpuCount))
		}
		h.cpuAt, h.cpuNanos = now, st.CPUUsageNanos
	case !errors.Is(err, errdefs.ErrNotSupported):
		s.log.Debug("backend stats; using the agent's", "sandbox", sb.ID, "err", err)
	}
	m.cpuUsedPct = math.Round(min(max(m.cpuUsedPct, 0), 100)*100) / 100
	return m, nil
}

// agentMetrics asks sb's agent for its GET /metrics.
func (s *Server) agentMetrics(ctx context.Context, sb *engine.Sandbox) (*agentMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+engine.SandboxAddr(sb.ID, agentPort)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(headerAccessToken, sb.AccessToken)
	resp, err := s.metrics.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: read metrics from its agent: %v: %w", sb.ID, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("sandbox %s: its agent answered /metrics with %s: %s: %w", sb.ID, resp.Status, msg, errdefs.ErrUnavailable)
	}
	var m agentMetrics
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&m); err != nil {
		return nil, fmt.Errorf("sandbox %s: its agent's metrics do not parse: %v: %w", sb.ID, err, errdefs.ErrUnavailable)
	}
	return &m, nil
}

// metricsWindow reads the optional start and end (Unix seconds) of a
// metrics query.
func metricsWindow(r *http.Request) (start, end int64, err error) {
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"start", &start}, {"end", &end}} {
		if s := q.Get(f.name); s != "" {
			if *f.dst, err = strconv.ParseInt(s, 10, 64); err != nil {
				return 0, 0, fmt.Errorf("%s %q is not a Unix time in seconds: %w", f.name, s, errdefs.ErrInvalidArgument)
			}
		}
	}
	return start, end, nil
}
