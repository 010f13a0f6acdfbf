package engine

import (
	"strconv"
	"strings"
	"time"
)

// The agent logs with log/slog's text handler: one record a line, as
// key=value pairs that begin with time, level and msg, a value quoted
// (Go syntax) when it holds a space, a quote, an equals sign or is empty.
// Anything else on the console (a runtime's message, what a process wrote
// to the agent's output) is a line of its own.

// parseAgentLine reads a line the agent logged. It reports false for a
// line that is not a record of the agent's: one that does not begin with
// a valid time and does not hold a level and a message.
func parseAgentLine(line string) (LogEntry, bool) {
	var e LogEntry
	var hasLevel, hasMsg bool
	rest := line
	for first := true; ; first = false {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		key, r, ok := readToken(rest, true)
		if !ok || !strings.HasPrefix(r, "=") {
			return LogEntry{}, false
		}
		val, r, ok := readToken(r[1:], false)
		if !ok {
			return LogEntry{}, false
		}
		rest = r
		switch {
		case first:
			t, err := time.Parse(time.RFC3339Nano, val)
			if key != "time" || err != nil {
				return LogEntry{}, false
			}
			e.Time = t
		case key == "level" && !hasLevel:
			e.Level, hasLevel = agentLevel(val), true
		case key == "msg" && !hasMsg:
			e.Message, hasMsg = val, true
		default:
			if e.Fields == nil {
				e.Fields = map[string]string{}
			}
			e.Fields[key] = val
		}
	}
	if !hasLevel || !hasMsg {
		return LogEntry{}, false
	}
	return e, true
}

// readToken reads a key (up to '=') or a value (up to a space) from the
// start of s, either quoted or bare, and returns it unquoted with what
// follows it. A bare key may not hold a space or a quote.
func readToken(s string, key bool) (tok, rest string, ok bool) {
	if strings.HasPrefix(s, `"`) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return "", "", false
		}
		tok, err = strconv.Unquote(q)
		if err != nil {
			return "", "", false
		}
		rest = s[len(q):]
		if !key && rest != "" && rest[0] != ' ' {
			return "", "", false
		}
		return tok, rest, true
	}
	stop := " "
	if key {
		stop = "= \""
	}
	i := strings.IndexAny(s, stop)
	if i < 0 {
		i = len(s)
	}
	if key && i == 0 {
		return "", "", false
	}
	return s[:i], s[i:], true
}

// agentLevel turns a slog level ("INFO", "WARN+2", "DEBUG-4") into one of
// the log levels: the level it is at or above.
func agentLevel(s string) string {
	name, off := s, 0
	if i := strings.IndexAny(s, "+-"); i > 0 {
		name = s[:i]
		if n, err := strconv.Atoi(s[i:]); err == nil {
			off = n
		}
	}
	rank, ok := levelRank[strings.ToLower(name)]
	if !ok {
		return LogInfo
	}
	// slog's levels are four apart: DEBUG -4, INFO 0, WARN 4, ERROR 8.
	v := rank*4 - 4 + off
	switch {
	case v >= 8:
		return LogError
	case v >= 4:
		return LogWarn
	case v >= 0:
		return LogInfo
	default:
		return LogDebug
	}
}
