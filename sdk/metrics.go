package sdk

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Metric is one sample of a sandbox's resource use, as E2B's getMetrics
// reports it. Sizes are in bytes. CPUCount, MemTotal and DiskTotal are
// what the sandbox may use (SandboxInfo's CPUCount, MemoryMB and
// DiskSizeMB); CPUUsedPct is its use of those CPUs since the sample
// before, 0 to 100.
type Metric struct {
	Timestamp  time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	// MemCache is the page cache counted apart from MemUsed; zero from a
	// server that cannot tell them apart.
	MemCache  uint64
	DiskUsed  uint64
	DiskTotal uint64
}

// MetricsTransport is a Transport that keeps sandboxes' resource use over
// time. Without it, Metrics fails with errdefs.ErrNotSupported.
type MetricsTransport interface {
	// SandboxMetrics returns the samples of sandbox id taken between
	// start and end (zeros: open), oldest first.
	SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]Metric, error)
}

// MetricsOption is a per-call option of Metrics.
type MetricsOption func(*metricsOptions)

type metricsOptions struct {
	start, end time.Time
}

// MetricsFrom keeps the samples taken at or after t (to the second).
func MetricsFrom(t time.Time) MetricsOption {
	return func(o *metricsOptions) { o.start = t }
}

// MetricsUntil keeps the samples taken at or before t (to the second).
func MetricsUntil(t time.Time) MetricsOption {
	return func(o *metricsOptions) { o.end = t }
}

// Metrics returns the samples of sandbox id's resource use, oldest first:
// `tupper serve` samples each running sandbox every 5 seconds and keeps
// the last hour, and samples it afresh for a call that would have
// nothing newer. A paused sandbox keeps its samples and gets no new ones.
func (c *Client) Metrics(ctx context.Context, id string, opts ...MetricsOption) ([]Metric, error) {
	var o metricsOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	mt, ok := t.(MetricsTransport)
	if !ok {
		return nil, fmt.Errorf("metrics of sandbox %q: this transport keeps none: %w", id, errdefs.ErrNotSupported)
	}
	list, err := mt.SandboxMetrics(ctx, id, o.start, o.end)
	if err != nil {
		return nil, fmt.Errorf("metrics of sandbox %q: %w", id, err)
	}
	return list, nil
}

// LatestMetricsTransport is a MetricsTransport that also returns the
// newest sample of many sandboxes in one call. Without it, LatestMetrics
// asks for each sandbox's samples in turn.
type LatestMetricsTransport interface {
	// LatestSandboxMetrics returns the newest sample of each sandbox of
	// ids that has one, by id.
	LatestSandboxMetrics(ctx context.Context, ids []string) (map[string]Metric, error)
}

// LatestMetrics returns the newest sample of the resource use of each
// sandbox of ids, by id, as `tupper top` shows them: sampled afresh where
// Metrics would be. Sandboxes that are gone, or have no sample yet, are
// left out.
func (c *Client) LatestMetrics(ctx context.Context, ids ...string) (map[string]Metric, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	if lt, ok := t.(LatestMetricsTransport); ok {
		out, err := lt.LatestSandboxMetrics(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("latest metrics: %w", err)
		}
		return out, nil
	}
	out := map[string]Metric{}
	for _, id := range ids {
		list, err := c.Metrics(ctx, id)
		switch {
		case errdefs.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		case len(list) > 0:
			out[id] = list[len(list)-1]
		}
	}
	return out, nil
}

// Metrics returns the samples of the sandbox's resource use (see
// Client.Metrics).
func (s *Sandbox) Metrics(ctx context.Context, opts ...MetricsOption) ([]Metric, error) {
	return s.client.Metrics(ctx, s.ID(), opts...)
}

// metricJSON is E2B's SandboxMetric.
type metricJSON struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    uint64    `json:"memUsed"`
	MemTotal   uint64    `json:"memTotal"`
	MemCache   uint64    `json:"memCache"`
	DiskUsed   uint64    `json:"diskUsed"`
	DiskTotal  uint64    `json:"diskTotal"`
}

// SandboxMetrics implements MetricsTransport: GET
// /sandboxes/{id}/metrics?start&end, in Unix seconds.
func (t *HTTPTransport) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]Metric, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", strconv.FormatInt(start.Unix(), 10))
	}
	if !end.IsZero() {
		q.Set("end", strconv.FormatInt(end.Unix(), 10))
	}
	var list []metricJSON
	if _, err := t.call(ctx, http.MethodGet, sandboxPath(id, "/metrics"), q, nil, &list); err != nil {
		return nil, err
	}
	out := make([]Metric, 0, len(list))
	for _, m := range list {
		out = append(out, Metric(m))
	}
	return out, nil
}

// latestMetricsBatch is the most sandboxes one GET /sandboxes/metrics
// names.
const latestMetricsBatch = 100

// LatestSandboxMetrics implements LatestMetricsTransport: GET
// /sandboxes/metrics?sandbox_ids=a,b, for up to latestMetricsBatch
// sandboxes a call.
func (t *HTTPTransport) LatestSandboxMetrics(ctx context.Context, ids []string) (map[string]Metric, error) {
	out := make(map[string]Metric, len(ids))
	for start := 0; start < len(ids); start += latestMetricsBatch {
		batch := ids[start:min(start+latestMetricsBatch, len(ids))]
		var resp struct {
			Sandboxes map[string]metricJSON `json:"sandboxes"`
		}
		q := url.Values{"sandbox_ids": {strings.Join(batch, ",")}}
		if _, err := t.call(ctx, http.MethodGet, "/sandboxes/metrics", q, nil, &resp); err != nil {
			return nil, err
		}
		for id, m := range resp.Sandboxes {
			out[id] = Metric(m)
		}
	}
	return out, nil
}
