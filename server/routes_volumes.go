package server

import (
	"fmt"
	"net/http"
	"strings"
)

// volumeRoutes registers the control plane's volume routes, which take an
// API key, as every control-plane route does.
func (s *Server) volumeRoutes(handle func(method, path string, h http.HandlerFunc)) {
	handle("POST", "/volumes", s.handleCreateVolume)
	handle("GET", "/volumes", s.handleListVolumes)
	handle("GET", "/volumes/{id}", s.handleGetVolume)
	handle("DELETE", "/volumes/{id}", s.handleDeleteVolume)
}

// volumeContentPrefix starts the paths of E2B's volume content routes.
const volumeContentPrefix = "/volumecontent/"

// withVolumeContent serves the volume content routes in front of next,
// the control plane. They take no API key: the E2B SDKs send them the
// volume's own token (Authorization: Bearer), which opens that volume
// alone (see Engine.OpenVolume).
func (s *Server) withVolumeContent(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	routes := map[string][]string{}
	handle := func(method, path string, h contentHandler) {
		mux.HandleFunc(method+" "+path, s.volumeContent(h))
		routes[path] = append(routes[path], method)
	}
	handle("GET", "/volumecontent/{id}/dir", s.handleVolumeList)
	handle("POST", "/volumecontent/{id}/dir", s.handleVolumeMakeDir)
	handle("GET", "/volumecontent/{id}/path", s.handleVolumeStat)
	handle("PATCH", "/volumecontent/{id}/path", s.handleVolumeUpdate)
	handle("DELETE", "/volumecontent/{id}/path", s.handleVolumeRemove)
	handle("GET", "/volumecontent/{id}/file", s.handleVolumeRead)
	handle("PUT", "/volumecontent/{id}/file", s.handleVolumeWrite)
	for path, methods := range routes {
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeContentStatus(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc(volumeContentPrefix, func(w http.ResponseWriter, r *http.Request) {
		writeContentStatus(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, volumeContentPrefix) {
			mux.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
