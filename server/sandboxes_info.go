package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// handleGet serves GET /sandboxes/{id}: the sandbox's details, with its
// access token and network settings.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := s.engine.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.detailJSON(sb))
}

// handleMetrics serves GET /sandboxes/{id}/metrics?start&end. Tupper keeps
// no history: the answer is the agent's current sample, or nothing when
// now is outside [start, end] (Unix seconds).
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
	out := []metricJSON{}
	if now := time.Now().Unix(); (start != 0 && now < start) || (end != 0 && now > end) {
		writeJSON(w, http.StatusOK, out)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+engine.SandboxAddr(sb.ID, agentPort)+"/metrics", nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req.Header.Set(headerAccessToken, sb.AccessToken)
	resp, err := s.metrics.Do(req)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("sandbox %s: read metrics from its agent: %v: %w", id, err, errdefs.ErrUnavailable))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.writeError(w, r, fmt.Errorf("sandbox %s: its agent answered /metrics with %s: %s: %w", id, resp.Status, msg, errdefs.ErrUnavailable))
		return
	}
	var m agentMetrics
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&m); err != nil {
		s.writeError(w, r, fmt.Errorf("sandbox %s: its agent's metrics do not parse: %v: %w", id, err, errdefs.ErrUnavailable))
		return
	}
	ts := time.Unix(m.Timestamp, 0).UTC()
	if m.Timestamp == 0 {
		ts = time.Now().UTC().Truncate(time.Second)
	}
	out = append(out, metricJSON{
		Timestamp: ts, TimestampUnix: ts.Unix(), CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	})
	writeJSON(w, http.StatusOK, out)
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
