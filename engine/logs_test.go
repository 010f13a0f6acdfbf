package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
)

// TestParseAgentLine reads what the agent's slog text handler writes,
// and refuses what it does not.
func TestParseAgentLine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Time(slog.TimeKey, at)
			}
			return a
		},
	}))
	logged := func(f func()) string {
		buf.Reset()
		f()
		return strings.TrimSuffix(buf.String(), "\n")
	}
	tests := []struct {
		name string
		line string
		want LogEntry
		ok   bool
	}{
		{name: "plain", line: logged(func() { log.Info("agent serving", "addr", "[::]:49983", "pid", 1) }), ok: true,
			want: LogEntry{Time: at, Level: LogInfo, Message: "agent serving", Fields: map[string]string{"addr": "[::]:49983", "pid": "1"}}},
		{name: "quoted", line: logged(func() { log.Warn(`say "hi"`, "err", "a b=c", "empty", "", "nl", "x\ny") }), ok: true,
			want: LogEntry{Time: at, Level: LogWarn, Message: `say "hi"`, Fields: map[string]string{"err": "a b=c", "empty": "", "nl": "x\ny"}}},
		{name: "debug", line: logged(func() { log.Debug("tick") }), ok: true,
			want: LogEntry{Time: at, Level: LogDebug, Message: "tick"}},
		{name: "error above", line: logged(func() { log.Log(context.Background(), slog.LevelError+2, "boom") }), ok: true,
			want: LogEntry{Time: at, Level: LogError, Message: "boom"}},
		{name: "between info and warn", line: logged(func() { log.Log(context.Background(), slog.LevelInfo+2, "hm") }), ok: true,
			want: LogEntry{Time: at, Level: LogInfo, Message: "hm"}},
		{name: "group", line: logged(func() { log.Info("m", slog.Group("req", "path", "/x y")) }), ok: true,
			want: LogEntry{Time: at, Level: LogInfo, Message: "m", Fields: map[string]string{"req.path": "/x y"}}},
		{name: "not a record", line: "runsc: starting container"},
		{name: "no time first", line: `level=INFO msg=hi`},
		{name: "bad time", line: `time=yesterday level=INFO msg=hi`},
		{name: "no message", line: `time=2026-01-02T03:04:05Z level=INFO`},
		{name: "unterminated quote", line: `time=2026-01-02T03:04:05Z level=INFO msg="hi`},
		{name: "key without value", line: `time=2026-01-02T03:04:05Z level=INFO msg=hi stray`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseAgentLine(tt.line)
			if ok != tt.ok {
				t.Fatalf("parseAgentLine(%q) ok = %v, want %v", tt.line, ok, tt.ok)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("parseAgentLine(%q) (-want +got):\n%s", tt.line, d)
			}
		})
	}
}

// TestParseLogTimes checks the time of lines that carry none: their
// nearest timed line above, else the sandbox's start.
func TestParseLogTimes(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	got := parseLog([]byte("first\n\ntime=2026-01-02T03:04:05Z level=INFO msg=one\r\nsecond\nbad \xff byte"), started)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []LogEntry{
		{Time: started, Level: LogInfo, Message: "first"},
		{Time: at, Level: LogInfo, Message: "one"},
		{Time: at, Level: LogInfo, Message: "second"},
		{Time: at, Level: LogInfo, Message: "bad \uFFFD byte"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// onlyReader hides every method of a reader but Read.
type onlyReader struct{ io.Reader }

// TestReadTail reads the end of a console, whole lines only, from a file
// that seeks and from a stream that does not.
func TestReadTail(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "line %04d\n", i) // 10 bytes each
	}
	console := b.String()
	tests := []struct {
		name    string
		n       int64
		want    string
		wantLen int
	}{
		{name: "all", n: int64(len(console)) + 5, want: "line 0000\n", wantLen: len(console)},
		{name: "exact", n: int64(len(console)), want: "line 0000\n", wantLen: len(console)},
		{name: "on a line's start", n: 100, want: "line 0990\n", wantLen: 100},
		{name: "inside a line", n: 105, want: "line 0990\n", wantLen: 100},
	}
	for _, tt := range tests {
		for _, r := range []struct {
			kind string
			open func() io.Reader
		}{
			{"seeker", func() io.Reader { return strings.NewReader(console) }},
			{"stream", func() io.Reader { return onlyReader{strings.NewReader(console)} }},
		} {
			t.Run(tt.name+"/"+r.kind, func(t *testing.T) {
				got, err := readTail(r.open(), tt.n)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tt.wantLen || !strings.HasPrefix(string(got), tt.want) || !strings.HasSuffix(string(got), "line 0999\n") {
					t.Errorf("readTail(%d): %d bytes from %.10q; want %d from %q to the last line", tt.n, len(got), got, tt.wantLen, tt.want)
				}
			})
		}
	}
}

// logFake is the fake backend with a console per sandbox.
type logFake struct {
	*backendtest.Fake
	console map[string]string
}

func (f *logFake) Logs(ctx context.Context, id string) (io.ReadCloser, error) {
	c, ok := f.console[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return io.NopCloser(strings.NewReader(c)), nil
}

// bareBackend is a backend with none of the optional abilities but the
// Dialer that reaches the fake's agents.
type bareBackend struct {
	backend.Backend
	backend.Dialer
}

// TestLogsAndStats checks the engine's logs and stats of a sandbox: from
// the backend that keeps them, within the caller's scope, and
// ErrNotSupported from one that does not.
func TestLogsAndStats(t *testing.T) {
	ctx := context.Background()
	b := &logFake{Fake: backendtest.NewFake(), console: map[string]string{}}
	e := newEngineOn(t, b, nil)
	sb, err := e.Create(WithScope(ctx, Scope{Team: "blue"}), CreateOptions{MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	b.console[sb.ID] = "hello\ntime=2030-01-01T00:00:00Z level=WARN msg=later\n"
	got, err := e.Logs(ctx, sb.ID, LogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := []LogEntry{
		{Time: sb.StartedAt.UTC(), Level: LogInfo, Message: "hello"},
		{Time: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Level: LogWarn, Message: "later"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("logs (-want +got):\n%s", d)
	}
	if got, err := e.Logs(ctx, sb.ID, LogQuery{MinLevel: LogWarn, Limit: 5}); err != nil || len(got) != 1 {
		t.Errorf("warnings: %v, %v; want the one", got, err)
	}
	if _, err := e.Logs(ctx, sb.ID, LogQuery{MinLevel: "loud"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an unknown level: %v, want ErrInvalidArgument", err)
	}
	st, err := e.Stats(ctx, sb.ID)
	if err != nil || st.MemoryLimitBytes != 256<<20 {
		t.Errorf("stats: %+v, %v; want the backend's, with its 256 MB limit", st, err)
	}
	other := WithScope(ctx, Scope{Team: "red"})
	if _, err := e.Logs(other, sb.ID, LogQuery{}); !errdefs.IsNotFound(err) {
		t.Errorf("logs through another team: %v, want not found", err)
	}
	if _, err := e.Stats(other, sb.ID); !errdefs.IsNotFound(err) {
		t.Errorf("stats through another team: %v, want not found", err)
	}
	if _, err := e.Logs(ctx, "nosuchsandbox", LogQuery{}); !errdefs.IsNotFound(err) {
		t.Errorf("logs of an unknown sandbox: %v, want not found", err)
	}

	f := backendtest.NewFake()
	bare := newEngineOn(t, bareBackend{f, f}, nil)
	sb, err = bare.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Logs(ctx, sb.ID, LogQuery{}); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("logs from a backend that keeps none: %v, want ErrNotSupported", err)
	}
	if _, err := bare.Stats(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("stats from a backend that measures nothing: %v, want ErrNotSupported", err)
	}
}
