package server

import "net/http"

// snapshotRoutes registers the routes of snapshots and forks.
func (s *Server) snapshotRoutes(handle func(method, path string, h http.HandlerFunc)) {}
