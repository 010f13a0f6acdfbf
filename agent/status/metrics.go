package status

import (
	"context"
	"math"
	"net/http"
	"runtime"
	"time"
)

// Metrics is the body of GET /metrics, in envd's field names. Memory and
// disk sizes are bytes unless the name says MiB.
type Metrics struct {
	Timestamp   int64   `json:"ts"` // Unix seconds
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"` // 0–100, across all CPUs
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"` // total minus available
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"` // of the filesystem at /
	DiskTotal   uint64  `json:"disk_total"`
}

// minCPUWindow is the shortest interval CPU use is measured over. Calls
// closer together than this measure afresh over this window, since a few
// milliseconds of jiffies say nothing.
const minCPUWindow = 100 * time.Millisecond

func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := h.collect(r.Context())
	if err != nil {
		h.log.Error("metrics", "err", err)
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, m)
}

func (h *Handler) collect(ctx context.Context) (*Metrics, error) {
	pct, err := h.cpuPercent(ctx)
	if err != nil {
		return nil, err
	}
	total, avail, err := readMem()
	if err != nil {
		return nil, err
	}
	used := total - min(avail, total)
	diskUsed, diskTotal, err := diskUsage("/")
	if err != nil {
		return nil, err
	}
	return &Metrics{
		Timestamp:   time.Now().Unix(),
		CPUCount:    runtime.NumCPU(),
		CPUUsedPct:  math.Round(pct*100) / 100,
		MemTotal:    total,
		MemUsed:     used,
		MemTotalMiB: total >> 20,
		MemUsedMiB:  used >> 20,
		DiskUsed:    diskUsed,
		DiskTotal:   diskTotal,
	}, nil
}

// cpuPercent measures CPU use since the previous call, or over
// minCPUWindow when that was too recent.
func (h *Handler) cpuPercent(ctx context.Context) (float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now, err := readCPU()
	if err != nil {
		return 0, err
	}
	if h.prev.at.IsZero() || now.at.Sub(h.prev.at) < minCPUWindow {
		h.prev = now
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(minCPUWindow):
		}
		if now, err = readCPU(); err != nil {
			return 0, err
		}
	}
	pct := now.usedPercentSince(h.prev)
	h.prev = now
	return pct, nil
}

// cpuSample holds the CPU counters of /proc/stat's "cpu" line at one moment.
type cpuSample struct {
	at          time.Time
	busy, total uint64
}

func (s cpuSample) usedPercentSince(prev cpuSample) float64 {
	if s.total <= prev.total || s.busy < prev.busy {
		return 0
	}
	pct := 100 * float64(s.busy-prev.busy) / float64(s.total-prev.total)
	return min(max(pct, 0), 100)
}
