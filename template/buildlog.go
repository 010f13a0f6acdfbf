package template

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A build's log lives in a file of its own, <root>/logs/<buildID>.jsonl
// (a LogEntry as JSON a line), not in the catalog: the catalog is
// rewritten whole at every change of any team's templates, and a build's
// output is large and grows a line at a time. Kept in the catalog, the
// output of one build of a few steps (16 steps printing 3 MB each: a
// 46 MiB catalog) made every template call of every team take 50 times as
// long, and a build's status answer 92 MiB.
//
// A build's log holds at most maxLogBytes, and each line at most
// maxLogLine; past the first, one line says that the log is full and the
// rest of the build's output is dropped (errors, such as the builder's
// line on a failed build, are kept).
const (
	maxLogBytes = 4 << 20
	maxLogLine  = 16 << 10
)

// buildLogs holds the builds' log files. It is safe for concurrent use.
type buildLogs struct {
	dir string
	mu  sync.Mutex
	// sizes are the sizes of the files written to since the daemon
	// started.
	sizes map[string]int64
}

func newBuildLogs(dir string) (*buildLogs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &buildLogs{dir: dir, sizes: map[string]int64{}}, nil
}

// path is build buildID's file; buildID is one the catalog holds (newID
// made it), never a client's string.
func (l *buildLogs) path(buildID string) string { return filepath.Join(l.dir, buildID+".jsonl") }

// add appends entries to build buildID's log, as far as its bound allows.
func (l *buildLogs) add(buildID string, entries []LogEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	size, ok := l.sizes[buildID]
	if !ok {
		if fi, err := os.Stat(l.path(buildID)); err == nil {
			size = fi.Size()
		}
	}
	f, err := os.OpenFile(l.path(buildID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, e := range entries {
		if len(e.Message) > maxLogLine {
			e.Message = e.Message[:maxLogLine] + "… (line cut)"
		}
		line, _ := json.Marshal(e)
		switch {
		case size < maxLogBytes, e.Level == "error" && size < 2*maxLogBytes:
		case size < maxLogBytes+maxLogLine:
			line, _ = json.Marshal(LogEntry{Timestamp: e.Timestamp, Level: "warn", Message: "The build's log is full: the rest of its output is not kept"})
			size = maxLogBytes + maxLogLine
		default:
			continue
		}
		size += int64(len(line)) + 1
		w.Write(line)
		w.WriteByte('\n')
	}
	l.sizes[buildID] = size
	return errors.Join(w.Flush(), f.Close())
}

// read returns build buildID's log from entry offset on.
func (l *buildLogs) read(buildID string, offset int) ([]LogEntry, error) {
	f, err := os.Open(l.path(buildID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []LogEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4*maxLogLine)
	for i := 0; sc.Scan(); i++ {
		if i < offset {
			continue
		}
		var e LogEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// remove deletes the logs of builds.
func (l *buildLogs) remove(builds ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range builds {
		os.Remove(l.path(id))
		delete(l.sizes, id)
	}
}

// logEntries splits msg into entries of level, a line each, stamped now.
func logEntries(level, msg string) []LogEntry {
	now := time.Now().UTC()
	var out []LogEntry
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		out = append(out, LogEntry{Timestamp: now, Level: level, Message: line})
	}
	return out
}
