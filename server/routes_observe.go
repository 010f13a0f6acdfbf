package server

import "net/http"

// observeRoutes registers the routes that watch a sandbox: its logs. Its
// metrics over time (handleMetrics) are registered with the sandbox's
// other routes in controlPlane.
func (s *Server) observeRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("GET", "/sandboxes/{id}/logs", s.handleLogs)
	handle("GET", "/v2/sandboxes/{id}/logs", s.handleLogsV2)
}
