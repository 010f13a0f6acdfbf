// Package status serves the agent's small read-only endpoints
// (shared/specs/e2b-wire.md §4): GET /health, GET /envs and GET /metrics.
package status

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
)

// Config configures the status handler.
type Config struct {
	// Env is the sandbox's base environment, KEY=VALUE entries as in
	// os.Environ; GET /envs reports it.
	Env []string
	// Logger receives the handler's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate fills in defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Handler serves /health, /envs and /metrics. It is safe for concurrent
// use.
type Handler struct {
	envMu sync.Mutex
	env   map[string]string
	log   *slog.Logger

	// mu guards prev, the CPU counters of the last /metrics call, against
	// which the next call measures CPU use.
	mu   sync.Mutex
	prev cpuSample
}

// New returns the status handler. Mount it at /health, /envs and /metrics;
// it routes on the request path and answers 404 for any other.
func New(cfg Config) *Handler {
	cfg.Validate()
	h := &Handler{env: envMap(cfg.Env), log: cfg.Logger.With("op", "status")}
	// A first sample now lets the first /metrics call report use since the
	// agent started instead of waiting to measure.
	if s, err := readCPU(); err == nil {
		h.prev = s
	}
	return h
}

// AddEnv sets vars in the environment /envs reports (see
// process.Service.AddEnv).
func (h *Handler) AddEnv(vars map[string]string) {
	h.envMu.Lock()
	defer h.envMu.Unlock()
	env := maps.Clone(h.env)
	maps.Copy(env, vars)
	h.env = env
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSONError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path)
		return
	}
	switch r.URL.Path {
	case "/health":
		// The SDKs' isRunning probes this; never cache the answer.
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	case "/envs":
		h.envMu.Lock()
		env := h.env
		h.envMu.Unlock()
		writeJSON(w, env)
	case "/metrics":
		h.metrics(w, r)
	default:
		writeJSONError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	}
}

// envMap turns KEY=VALUE entries into a map; a later entry for a key wins,
// as in a process environment, and entries without "=" are skipped.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}
