package server

import (
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/proto"
)

// The control plane's response bodies, in the E2B API's field names
// (shared/specs/e2b-wire.md §2). Fields the Python SDK requires are never
// omitted.

// clientID is the constant "client" every sandbox is reported on; the
// Python SDK requires the field.
const clientID = "tupper"

// sandboxJSON answers create and connect.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	Alias              string  `json:"alias,omitempty"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	Domain             string  `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	// Backend is Tupper's extension: the backend the sandbox runs on.
	Backend string `json:"backend,omitempty"`
	// Warm is Tupper's extension: the sandbox came from a warm pool,
	// booted before its create.
	Warm bool `json:"warm,omitempty"`
}

// listedSandboxJSON is one entry of a listing.
type listedSandboxJSON struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []volumeMount     `json:"volumeMounts"`
	// Backend is Tupper's extension: the backend the sandbox runs on.
	Backend string `json:"backend,omitempty"`
}

// sandboxDetailJSON answers GET /sandboxes/{id}.
type sandboxDetailJSON struct {
	listedSandboxJSON
	Domain              string            `json:"domain"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Network             *netpolicy.Policy `json:"network,omitempty"`
	Lifecycle           lifecycleJSON     `json:"lifecycle"`
}

// lifecycleJSON says what happens when a sandbox's time is up ("kill" or
// "pause") and whether a request wakes it once paused.
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// mountsOf is the volumes mounted into sb, as listings report them.
func mountsOf(sb *engine.Sandbox) []volumeMount {
	out := make([]volumeMount, 0, len(sb.VolumeMounts))
	for _, m := range sb.VolumeMounts {
		out = append(out, volumeMount{Name: m.Name, Path: m.Path})
	}
	return out
}

// metricJSON is one sample of GET /sandboxes/{id}/metrics.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// agentMetrics is the body of the agent's GET /metrics, in envd's names.
type agentMetrics struct {
	Timestamp  int64   `json:"ts"`
	CPUCount   int     `json:"cpu_count"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   uint64  `json:"mem_total"`
	MemUsed    uint64  `json:"mem_used"`
	DiskUsed   uint64  `json:"disk_used"`
	DiskTotal  uint64  `json:"disk_total"`
}

// publicTraffic reports whether the exposed ports of a sandbox with
// network policy p are open without a token.
func publicTraffic(p *netpolicy.Policy) bool {
	return p == nil || p.AllowPublicTraffic == nil || *p.AllowPublicTraffic
}

func (s *Server) sandboxJSON(sb *engine.Sandbox) sandboxJSON {
	out := sandboxJSON{
		TemplateID: sb.TemplateID, SandboxID: sb.ID, ClientID: clientID, EnvdVersion: proto.EnvdVersion,
		Alias: sb.TemplateID, EnvdAccessToken: sb.AccessToken, Domain: s.cfg.Domain, Backend: sb.Backend,
		Warm: sb.Warm,
	}
	if !publicTraffic(sb.Network) {
		tok := trafficToken(sb.AccessToken)
		out.TrafficAccessToken = &tok
	}
	return out
}

func listedJSON(sb *engine.Sandbox) listedSandboxJSON {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return listedSandboxJSON{
		TemplateID: sb.TemplateID, Alias: sb.TemplateID, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt.UTC(), EndAt: sb.EndAt.UTC(),
		CPUCount: max(1, int(sb.CPUs+0.5)), MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB,
		Metadata: md, State: sb.State, EnvdVersion: proto.EnvdVersion, VolumeMounts: mountsOf(sb),
		Backend: sb.Backend,
	}
}

func (s *Server) detailJSON(sb *engine.Sandbox) sandboxDetailJSON {
	return sandboxDetailJSON{
		listedSandboxJSON: listedJSON(sb),
		Domain:            s.cfg.Domain, EnvdAccessToken: sb.AccessToken,
		AllowInternetAccess: sb.AllowInternetAccess, Network: sb.Network.Redact(),
		Lifecycle: lifecycleOf(sb),
	}
}

func lifecycleOf(sb *engine.Sandbox) lifecycleJSON {
	if sb.AutoPause {
		return lifecycleJSON{OnTimeout: "pause", AutoResume: sb.AutoResume}
	}
	return lifecycleJSON{OnTimeout: "kill"}
}
