package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
)

// The levels of log entries, lowest first, as E2B names them.
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"
)

var levelRank = map[string]int{LogDebug: 0, LogInfo: 1, LogWarn: 2, LogError: 3}

// Bounds of a read of a sandbox's log.
const (
	// MaxLogBytes is how much of the end of a sandbox's console is read:
	// as much as the gVisor and runc backends keep of it.
	MaxLogBytes = 4 << 20
	// DefaultLogLimit is LogQuery.Limit's zero value, E2B's default;
	// MaxLogLimit its largest.
	DefaultLogLimit = 1000
	MaxLogLimit     = 10000
)

// LogEntry is one line of a sandbox's log.
//
// A line the agent logged carries its own time, level and attributes
// (Fields). Any other line (a runtime's message, output a process wrote
// to the agent's) is level info and has no time of its own: it takes the
// time of the nearest line above it that has one, or the sandbox's start
// when none does. The console keeps no arrival times, and a time read
// later would move each time the log is read; a neighbour's time is
// stable, and keeps the entries in order.
type LogEntry struct {
	Time    time.Time
	Level   string
	Message string
	// Fields are the line's other attributes; nil when it has none.
	Fields map[string]string
}

// LogQuery selects entries of a sandbox's log.
type LogQuery struct {
	// Cursor keeps the entries at or after it, oldest first; with
	// Backward, those at or before it, newest first. Zero means from the
	// log's start (Backward: from its end).
	Cursor   time.Time
	Backward bool
	// Limit is the most entries returned; zero means DefaultLogLimit, and
	// it is at most MaxLogLimit.
	Limit int
	// MinLevel keeps the entries at or above this level; empty keeps all.
	MinLevel string
	// Search keeps the entries whose message holds it (case-sensitive).
	Search string
}

// Validate checks q's level and limit.
func (q *LogQuery) Validate() error {
	if _, ok := levelRank[q.MinLevel]; q.MinLevel != "" && !ok {
		return fmt.Errorf("log level %q: want debug, info, warn or error: %w", q.MinLevel, errdefs.ErrInvalidArgument)
	}
	if q.Limit < 0 {
		return fmt.Errorf("log limit %d is negative: %w", q.Limit, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Logs returns the entries of sandbox id's log that q selects: its
// console as its backend keeps it (see backend.LogReader), of which the
// last MaxLogBytes are read. A paused sandbox fails with
// errdefs.ErrFailedPrecondition (its console is in its checkpoint, and
// comes back when it resumes); a backend that keeps no console, with
// errdefs.ErrNotSupported.
func (e *Engine) Logs(ctx context.Context, id string, q LogQuery) ([]LogEntry, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := e.checkScope(ctx, id); err != nil {
		return nil, err
	}
	l, err := e.liveOf(id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	rec := l.rec
	e.mu.Unlock()
	var rc io.ReadCloser
	switch {
	case rec.State == store.StatePaused:
		// Its log went into its checkpoint (a pause of files alone keeps
		// none).
		rc, err = os.Open(filepath.Join(e.checkpointDir(id), backend.CheckpointLog))
		if err != nil {
			return nil, fmt.Errorf("sandbox %q is paused, and its pause kept no log: its logs are back once it runs: %w", id, errdefs.ErrFailedPrecondition)
		}
	case rec.State != store.StateRunning:
		return nil, fmt.Errorf("sandbox %q is %s: its logs are back once it runs: %w", id, rec.State, errdefs.ErrFailedPrecondition)
	default:
		lr, ok := l.be.(backend.LogReader)
		if !ok {
			return nil, fmt.Errorf("sandbox %q: the %s backend keeps no logs: %w", id, l.beName, errdefs.ErrNotSupported)
		}
		if rc, err = lr.Logs(ctx, id); err != nil {
			return nil, err
		}
	}
	defer rc.Close()
	tail, err := readTail(rc, MaxLogBytes)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: read its logs: %w", id, err)
	}
	return selectLogs(parseLog(tail, rec.StartedAt), q), nil
}

// readTail reads the last n bytes of r, less the line that they begin in
// the middle of. A reader that can seek is read from there; any other is
// read through.
func readTail(r io.Reader, n int64) ([]byte, error) {
	// One byte more than asked says whether the window starts a line.
	n++
	if s, ok := r.(io.Seeker); ok {
		if size, err := s.Seek(0, io.SeekEnd); err == nil {
			if _, err := s.Seek(max(size-n, 0), io.SeekStart); err != nil {
				return nil, err
			}
			b, err := io.ReadAll(io.LimitReader(r, n))
			if err != nil {
				return nil, err
			}
			return wholeLines(b, n), nil
		}
	}
	var buf []byte
	chunk := make([]byte, 64<<10)
	for {
		m, err := r.Read(chunk)
		buf = append(buf, chunk[:m]...)
		if int64(len(buf)) > 2*n {
			buf = append(buf[:0:0], buf[int64(len(buf))-n:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > n {
		buf = buf[int64(len(buf))-n:]
	}
	return wholeLines(buf, n), nil
}

// wholeLines drops what b holds of the line before its window: b is the
// window and the byte before it when it is n bytes long, else all there
// was.
func wholeLines(b []byte, n int64) []byte {
	if int64(len(b)) < n {
		return b
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return nil
}

// parseLog turns a console's lines into entries (see LogEntry for the
// time of a line that has none); started is the sandbox's start.
func parseLog(b []byte, started time.Time) []LogEntry {
	var out []LogEntry
	last := started.UTC()
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if e, ok := parseAgentLine(line); ok {
			e.Time = e.Time.UTC()
			last = e.Time
			out = append(out, e)
			continue
		}
		out = append(out, LogEntry{Time: last, Level: LogInfo, Message: strings.ToValidUTF8(line, "\uFFFD")})
	}
	return out
}

// selectLogs applies q to entries, which are in the console's order.
func selectLogs(entries []LogEntry, q LogQuery) []LogEntry {
	limit := q.Limit
	if limit == 0 {
		limit = DefaultLogLimit
	}
	limit = min(limit, MaxLogLimit)
	keep := func(e LogEntry) bool {
		switch {
		case q.MinLevel != "" && levelRank[e.Level] < levelRank[q.MinLevel]:
			return false
		case q.Search != "" && !strings.Contains(e.Message, q.Search):
			return false
		case q.Cursor.IsZero():
			return true
		case q.Backward:
			return !e.Time.After(q.Cursor)
		default:
			return !e.Time.Before(q.Cursor)
		}
	}
	out := []LogEntry{}
	if q.Backward {
		for _, e := range slices.Backward(entries) {
			if len(out) == limit {
				break
			}
			if keep(e) {
				out = append(out, e)
			}
		}
		return out
	}
	for _, e := range entries {
		if len(out) == limit {
			break
		}
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}
