package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// WarmTracker is an http.RoundTripper that notes, from each create's
// answer, whether the daemon handed out a sandbox from its warm pool (the
// `warm` field of Tupper's extension), which the Go SDK does not surface.
// Its zero value carries requests with http.DefaultTransport. It is safe
// for concurrent use.
type WarmTracker struct {
	// Base carries the requests; nil means http.DefaultTransport.
	Base http.RoundTripper

	mu   sync.Mutex
	warm map[string]bool
}

// RoundTrip carries req and, for a successful POST /sandboxes, reads the
// answer to note its sandbox's warmth before handing it on unchanged.
func (w *WarmTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	base := w.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/sandboxes") || resp.StatusCode/100 != 2 {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // the SDK meets the short body itself
	}
	var created struct {
		SandboxID string `json:"sandboxID"`
		Warm      bool   `json:"warm"`
	}
	if json.Unmarshal(body, &created) == nil && created.SandboxID != "" {
		w.mu.Lock()
		if w.warm == nil {
			w.warm = map[string]bool{}
		}
		w.warm[created.SandboxID] = created.Warm
		w.mu.Unlock()
	}
	return resp, nil
}

// Warm reports whether the create of sandbox id said it came warm.
func (w *WarmTracker) Warm(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warm[id]
}
