package server

import (
	"context"
	"sync"
	"time"

	"github.com/lightbearco/tupper/engine/store"
)

// The control plane keeps each running sandbox's resource use over time,
// as E2B does, so that GET /sandboxes/{id}/metrics answers a series: a
// sampler takes a sample of every running sandbox each period into a
// history per sandbox, in memory, of the last metricsKeep. A paused
// sandbox gets no new samples and keeps its old ones; a killed one's go
// at the next round. Nothing survives a restart of the daemon.

const (
	// DefaultMetricsPeriod is Config.MetricsPeriod's zero value: E2B's.
	DefaultMetricsPeriod = 5 * time.Second
	// metricsKeep is how far back a history goes.
	metricsKeep = time.Hour
	// samplerParallel bounds the samples taken at once: each runs the
	// backend's stats (for gVisor, a runsc process) and asks the agent.
	samplerParallel = 4
	// minSampleTimeout bounds one sample when the period is shorter.
	minSampleTimeout = 5 * time.Second
)

// metricSample is one sample of a sandbox's resource use. Sizes are in
// bytes.
type metricSample struct {
	at         time.Time
	cpuCount   int
	cpuUsedPct float64
	memUsed    uint64
	memTotal   uint64
	memCache   uint64
	diskUsed   uint64
	diskTotal  uint64
}

// metricsHistory is one sandbox's samples. Its mutex orders the samples
// taken of the sandbox (the sampler's and a request's), since each
// measures CPU use since the one before.
type metricsHistory struct {
	mu sync.Mutex
	// samples are oldest first, at most size.
	samples []metricSample
	size    int
	// cpu is the backend's last reading of the sandbox's CPU time, and
	// when it was taken; zero before the first.
	cpuAt    time.Time
	cpuNanos uint64
}

// add appends m, dropping the oldest sample when the history is full.
// h.mu must be held.
func (h *metricsHistory) add(m metricSample) {
	if len(h.samples) < h.size {
		h.samples = append(h.samples, m)
		return
	}
	copy(h.samples, h.samples[1:])
	h.samples[len(h.samples)-1] = m
}

// newest returns the time of the newest sample, zero when there is none.
// h.mu must be held.
func (h *metricsHistory) newest() time.Time {
	if len(h.samples) == 0 {
		return time.Time{}
	}
	return h.samples[len(h.samples)-1].at
}

// window returns the samples whose time, in Unix seconds, lies within
// [start, end], oldest first; a zero bound is open.
func (h *metricsHistory) window(start, end int64) []metricSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []metricSample
	for _, m := range h.samples {
		if sec := m.at.Unix(); (start == 0 || sec >= start) && (end == 0 || sec <= end) {
			out = append(out, m)
		}
	}
	return out
}

// sampler samples the running sandboxes of a Server every period. It is
// started by New and stopped by Close.
type sampler struct {
	srv    *Server
	period time.Duration
	size   int

	mu        sync.Mutex
	histories map[string]*metricsHistory

	cancel context.CancelFunc
	done   chan struct{}
	stop   sync.Once
}

func newSampler(srv *Server, period time.Duration) *sampler {
	return &sampler{
		srv: srv, period: period, size: int(metricsKeep/period) + 1,
		histories: map[string]*metricsHistory{},
	}
}

// start begins the rounds, on a context of the sampler's own.
func (sm *sampler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	sm.cancel, sm.done = cancel, make(chan struct{})
	go sm.run(ctx)
}

// close stops the rounds and waits for the one under way.
func (sm *sampler) close() {
	sm.stop.Do(func() {
		sm.cancel()
		<-sm.done
	})
}

func (sm *sampler) run(ctx context.Context) {
	defer close(sm.done)
	tick := time.NewTicker(sm.period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sm.round(ctx)
	}
}

// round samples every running sandbox once, and forgets the histories of
// the sandboxes the engine no longer has.
func (sm *sampler) round(ctx context.Context) {
	ids := sm.srv.engine.Running()
	sm.prune(ids)
	sem := make(chan struct{}, samplerParallel)
	var wg sync.WaitGroup
	for _, id := range ids {
		sb, err := sm.srv.engine.Get(ctx, id)
		if err != nil || sb.State != store.StateRunning {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, max(sm.period, minSampleTimeout))
			defer cancel()
			h := sm.history(id)
			h.mu.Lock()
			defer h.mu.Unlock()
			m, err := sm.srv.takeSample(sctx, sb, h)
			if err != nil {
				sm.srv.log.Debug("metrics sample", "sandbox", id, "err", err)
				return
			}
			h.add(m)
		}()
	}
	wg.Wait()
}

// history returns sandbox id's history, made when it has none.
func (sm *sampler) history(id string) *metricsHistory {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	h, ok := sm.histories[id]
	if !ok {
		h = &metricsHistory{size: sm.size}
		sm.histories[id] = h
	}
	return h
}

// prune forgets the histories of the sandboxes not in live.
func (sm *sampler) prune(live []string) {
	keep := make(map[string]bool, len(live))
	for _, id := range live {
		keep[id] = true
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for id := range sm.histories {
		if !keep[id] {
			delete(sm.histories, id)
		}
	}
}
