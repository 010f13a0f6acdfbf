package template

import (
	"os"
	"strings"
	"testing"
)

// TestBuildLogs checks a build's log file: entries come back in order
// from any offset, a long line is cut, output past the bound is dropped
// with one line saying so while errors are still kept, and remove deletes
// the file.
func TestBuildLogs(t *testing.T) {
	l, err := newBuildLogs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.add("bld1", logEntries("info", "one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	got, err := l.read("bld1", 1)
	if err != nil || len(got) != 1 || got[0].Message != "two" || got[0].Level != "info" {
		t.Fatalf("read from offset 1: %+v, %v", got, err)
	}
	if got, _ := l.read("bld-none", 0); len(got) != 0 {
		t.Errorf("the log of a build that logged nothing: %+v", got)
	}

	l.add("bld1", logEntries("info", strings.Repeat("x", 3*maxLogLine)))
	for range 2 * maxLogBytes / maxLogLine {
		l.add("bld1", logEntries("info", strings.Repeat("y", maxLogLine)))
	}
	l.add("bld1", logEntries("error", "Build failed: step 3"))
	fi, err := os.Stat(l.path("bld1"))
	if err != nil || fi.Size() > maxLogBytes+4*maxLogLine {
		t.Errorf("the log's file after 8 MiB of output: %v bytes, %v; want about %d", fi.Size(), err, maxLogBytes)
	}
	all, err := l.read("bld1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all[2].Message); n > maxLogLine+100 {
		t.Errorf("a line of %d bytes is kept whole (%d)", 3*maxLogLine, n)
	}
	full := 0
	for _, e := range all {
		if strings.Contains(e.Message, "log is full") {
			full++
		}
	}
	if full != 1 || all[len(all)-1].Message != "Build failed: step 3" {
		t.Errorf("%d lines say the log is full, the last is %q; want one, and the error kept", full, all[len(all)-1].Message)
	}

	l.remove("bld1")
	if _, err := os.Stat(l.path("bld1")); !os.IsNotExist(err) {
		t.Errorf("the log after remove: %v", err)
	}
}
