package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// A sandbox's logs are its console (see engine.Logs): its agent's records
// and its start command's output. E2B has two routes to them: the first,
// which @e2b/cli's `sandbox logs` calls, answers each entry twice, as a
// line of JSON (which the CLI parses for its level and logger) and as a
// structured entry; the second answers structured entries alone, and can
// read backwards, filter by level and search.

// logLineLogger is the logger a line names when it names no component.
const logLineLogger = "agent"

// sandboxLogJSON is an entry of E2B's SandboxLogs.logs: the entry as a
// line of JSON.
type sandboxLogJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// sandboxLogEntryJSON is E2B's SandboxLogEntry.
type sandboxLogEntryJSON struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// handleLogs serves GET /sandboxes/{id}/logs?start&limit: the entries
// from start (Unix milliseconds) on, oldest first, as E2B's SandboxLogs.
func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var lq engine.LogQuery
	var err error
	if lq.Cursor, err = queryMillis(q.Get("start"), "start"); err != nil {
		s.writeError(w, r, err)
		return
	}
	if lq.Limit, err = queryLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	entries, err := s.engine.Logs(r.Context(), r.PathValue("id"), lq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := struct {
		Logs       []sandboxLogJSON      `json:"logs"`
		LogEntries []sandboxLogEntryJSON `json:"logEntries"`
	}{Logs: make([]sandboxLogJSON, 0, len(entries)), LogEntries: make([]sandboxLogEntryJSON, 0, len(entries))}
	for _, e := range entries {
		out.Logs = append(out.Logs, sandboxLogJSON{Timestamp: e.Time, Line: logLine(e)})
		out.LogEntries = append(out.LogEntries, sandboxLogEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleLogsV2 serves GET /v2/sandboxes/{id}/logs?cursor&direction&level&limit&search:
// from cursor (Unix milliseconds) forward, oldest first, or backward,
// newest first; at or above level; whose message holds search.
func (s *Server) handleLogsV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lq := engine.LogQuery{MinLevel: strings.ToLower(q.Get("level")), Search: q.Get("search")}
	var err error
	if lq.Cursor, err = queryMillis(q.Get("cursor"), "cursor"); err != nil {
		s.writeError(w, r, err)
		return
	}
	if lq.Limit, err = queryLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		lq.Backward = true
	default:
		s.writeError(w, r, fmt.Errorf("direction %q: want forward or backward: %w", d, errdefs.ErrInvalidArgument))
		return
	}
	entries, err := s.engine.Logs(r.Context(), r.PathValue("id"), lq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := struct {
		Logs []sandboxLogEntryJSON `json:"logs"`
	}{Logs: make([]sandboxLogEntryJSON, 0, len(entries))}
	for _, e := range entries {
		out.Logs = append(out.Logs, sandboxLogEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func sandboxLogEntry(e engine.LogEntry) sandboxLogEntryJSON {
	fields := e.Fields
	if fields == nil {
		fields = map[string]string{}
	}
	return sandboxLogEntryJSON{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: fields}
}

// logLine renders e as the JSON object E2B's log lines are: its fields,
// with its level, message and logger (the line's component, else
// logLineLogger) over any field of those names.
func logLine(e engine.LogEntry) string {
	m := make(map[string]string, len(e.Fields)+3)
	for k, v := range e.Fields {
		m[k] = v
	}
	if m["component"] != "" {
		m["logger"] = m["component"]
	} else {
		m["logger"] = logLineLogger
	}
	m["level"], m["message"] = e.Level, e.Message
	b, _ := json.Marshal(m)
	return string(b)
}

// queryMillis reads an optional query parameter in Unix milliseconds.
func queryMillis(s, name string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not a Unix time in milliseconds: %w", name, s, errdefs.ErrInvalidArgument)
	}
	return time.UnixMilli(ms), nil
}

// queryLimit reads an optional limit; zero means the engine's default.
func queryLimit(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("limit %q is not a count: %w", s, errdefs.ErrInvalidArgument)
	}
	return n, nil
}
