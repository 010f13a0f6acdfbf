package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
)

// LogEntry is one line of a sandbox's log: what its agent logged (its own
// messages and its start command's output) and whatever else reached its
// console. Level is "debug", "info", "warn" or "error". Fields are the
// line's other attributes.
type LogEntry struct {
	Timestamp time.Time
	Level     string
	Message   string
	Fields    map[string]string
}

// LogQuery selects entries of a sandbox's log.
type LogQuery struct {
	// Cursor keeps the entries at or after it (to the millisecond),
	// oldest first; with Backward, those at or before it, newest first.
	// Zero means from the start (Backward: from the end).
	Cursor   time.Time
	Backward bool
	// Limit is the most entries; 0 means the server's default (1000).
	Limit int
	// Level keeps the entries at or above it; empty keeps all.
	Level string
	// Search keeps the entries whose message holds it (case-sensitive).
	Search string
}

// LogTransport is a Transport that reads sandboxes' logs. Without it,
// Logs fails with errdefs.ErrNotSupported.
type LogTransport interface {
	SandboxLogs(ctx context.Context, id string, q LogQuery) ([]LogEntry, error)
}

// LogOption is a per-call option of Logs.
type LogOption func(*LogQuery)

// LogsFrom keeps the entries at or after t (before it, with
// LogsBackward).
func LogsFrom(t time.Time) LogOption { return func(q *LogQuery) { q.Cursor = t } }

// LogsBackward reads from the end (or LogsFrom's time) back, newest
// first.
func LogsBackward() LogOption { return func(q *LogQuery) { q.Backward = true } }

// LogsLimit returns at most n entries.
func LogsLimit(n int) LogOption { return func(q *LogQuery) { q.Limit = n } }

// LogsLevel keeps the entries at or above level: "debug", "info", "warn"
// or "error".
func LogsLevel(level string) LogOption { return func(q *LogQuery) { q.Level = level } }

// LogsSearch keeps the entries whose message holds s (case-sensitive).
func LogsSearch(s string) LogOption { return func(q *LogQuery) { q.Search = s } }

// Logs returns entries of sandbox id's log, by default its first 1000,
// oldest first. A line that carries no time of its own has that of the
// nearest line before it that does. The log of a paused sandbox is back
// once it resumes; until then Logs fails with an error of class
// errdefs.ErrFailedPrecondition.
func (c *Client) Logs(ctx context.Context, id string, opts ...LogOption) ([]LogEntry, error) {
	var q LogQuery
	for _, opt := range opts {
		if opt != nil {
			opt(&q)
		}
	}
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	lt, ok := t.(LogTransport)
	if !ok {
		return nil, fmt.Errorf("logs of sandbox %q: this transport reads none: %w", id, errdefs.ErrNotSupported)
	}
	list, err := lt.SandboxLogs(ctx, id, q)
	if err != nil {
		return nil, fmt.Errorf("logs of sandbox %q: %w", id, err)
	}
	return list, nil
}

// Logs returns entries of the sandbox's log (see Client.Logs).
func (s *Sandbox) Logs(ctx context.Context, opts ...LogOption) ([]LogEntry, error) {
	return s.client.Logs(ctx, s.ID(), opts...)
}

// logEntryJSON is E2B's SandboxLogEntry.
type logEntryJSON struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// SandboxLogs implements LogTransport: GET /v2/sandboxes/{id}/logs. A
// paused sandbox's logs fail with errdefs.ErrFailedPrecondition.
func (t *HTTPTransport) SandboxLogs(ctx context.Context, id string, q LogQuery) ([]LogEntry, error) {
	v := url.Values{}
	if !q.Cursor.IsZero() {
		v.Set("cursor", strconv.FormatInt(q.Cursor.UnixMilli(), 10))
	}
	if q.Backward {
		v.Set("direction", "backward")
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Level != "" {
		v.Set("level", q.Level)
	}
	if q.Search != "" {
		v.Set("search", q.Search)
	}
	var out struct {
		Logs []logEntryJSON `json:"logs"`
	}
	if _, err := t.call(ctx, http.MethodGet, "/v2"+sandboxPath(id, "/logs"), v, nil, &out); err != nil {
		// The route's 409 means the sandbox is not running (paused),
		// where the status's usual class would say "exists".
		if e := (*Error)(nil); errors.As(err, &e) && e.Status == http.StatusConflict {
			e.Code, e.class = connect.CodeFailedPrecondition.String(), errdefs.ErrFailedPrecondition
		}
		return nil, err
	}
	list := make([]LogEntry, 0, len(out.Logs))
	for _, e := range out.Logs {
		list = append(list, LogEntry(e))
	}
	return list, nil
}
