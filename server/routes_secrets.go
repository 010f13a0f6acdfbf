package server

import "net/http"

// secretRoutes registers the routes of secrets (secrets.go): E2B's
// Secret API, scoped to the API key's team.
func (s *Server) secretRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("POST", "/secrets", s.handleCreateSecret)
	handle("GET", "/secrets", s.handleListSecrets)
	handle("GET", "/secrets/{id}", s.handleGetSecret)
	handle("POST", "/secrets/{id}", s.handleUpdateSecret)
	handle("DELETE", "/secrets/{id}", s.handleDeleteSecret)
}
