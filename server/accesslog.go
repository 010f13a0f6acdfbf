package server

import (
	"log/slog"
	"net/http"
	"time"
)

// statusWriter remembers the status of a response for the access log.
// Unwrap lets http.ResponseController reach the real writer, so that the
// proxy can still flush streams and hijack upgraded connections.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged wraps h with a debug-level access log. The query is left out: it
// may hold a signed URL's signature.
func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.log.Enabled(r.Context(), slog.LevelDebug) {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "host", r.Host,
			"sandbox", r.Header.Get(headerSandboxID), "status", sw.status, "took", time.Since(start))
	})
}
