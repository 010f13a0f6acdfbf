package startcmd

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	pb "github.com/lightbearco/tupper/proto/process"
)

// maxLine bounds one line of the start command's output in the log: a
// longer one is logged in pieces.
const maxLine = 4 << 10

// lineLogger logs the start command's output line by line, each line
// prefixed with the command's tag and tagged with its stream, so that the
// sandbox's console (the backend keeps the agent's log) reads as the
// command's own output would. It is not safe for concurrent use: Launch
// hands out events from one goroutine.
type lineLogger struct {
	log     *slog.Logger
	pending map[string][]byte // a line begun but not ended, by stream
}

func newLineLogger(log *slog.Logger) *lineLogger {
	return &lineLogger{log: log, pending: map[string][]byte{}}
}

// write logs every line d completes.
func (l *lineLogger) write(d *pb.ProcessEvent_DataEvent) {
	stream, b := "stdout", d.GetStdout()
	switch {
	case d.GetStderr() != nil:
		stream, b = "stderr", d.GetStderr()
	case d.GetPty() != nil:
		stream, b = "pty", d.GetPty()
	}
	buf := append(l.pending[stream], b...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		l.line(stream, buf[:i])
		buf = buf[i+1:]
	}
	for len(buf) >= maxLine {
		l.line(stream, buf[:maxLine])
		buf = buf[maxLine:]
	}
	l.pending[stream] = append([]byte(nil), buf...)
}

// flush logs what is left of unfinished lines.
func (l *lineLogger) flush() {
	for _, stream := range []string{"stdout", "stderr", "pty"} {
		if b := l.pending[stream]; len(b) > 0 {
			l.line(stream, b)
		}
		delete(l.pending, stream)
	}
}

func (l *lineLogger) line(stream string, b []byte) {
	l.log.Info(Tag+": "+strings.ToValidUTF8(string(bytes.TrimSuffix(b, []byte("\r"))), "\uFFFD"), "stream", stream)
}

// appendTail appends parts to buf and keeps its last max bytes.
func appendTail(buf []byte, max int, parts ...[]byte) []byte {
	for _, p := range parts {
		buf = append(buf, p...)
	}
	if len(buf) > max {
		buf = append(buf[:0], buf[len(buf)-max:]...)
	}
	return buf
}

// cleanOutput is output as text for a message: valid UTF-8 (a tail may
// begin in the middle of a character), without surrounding blank space.
func cleanOutput(b []byte) string {
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// maxQuoted bounds a command as messages quote it.
const maxQuoted = 300

// quote quotes s for a message, shortened to its first maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}
