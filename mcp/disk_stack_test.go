package mcp_test

import (
	"testing"
)

// TestWriteFileDiskFull fills a sandbox's disk (create_sandbox disk_mb)
// and writes a file: write_file says the sandbox's disk is full and what to
// do, the old content stays, and the sandbox lives on.
func TestWriteFileDiskFull(t *testing.T) {
	cs, _ := newStackSession(t)
	var created struct {
		Sandbox struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"sandbox"`
	}
	callOK(t, cs, "create_sandbox", map[string]any{"disk_mb": 64}, &created)
	args := func(kv ...any) map[string]any {
		m := map[string]any{"sandbox": created.Sandbox.SandboxID}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	callOK(t, cs, "write_file", args("path", "notes.txt", "content", "old"), nil)
	var run struct {
		ExitCode *int   `json:"exit_code"`
		Stderr   string `json:"stderr"`
	}
	callOK(t, cs, "run_command", args("command", "dd if=/dev/zero of=/tmp/fill bs=1M count=100"), &run)
	if run.ExitCode == nil || *run.ExitCode == 0 {
		t.Fatalf("filling a 64 MB disk with 100 MB: %+v", run)
	}
	callErr(t, cs, "write_file", args("path", "notes.txt", "content", "a new text that does not fit"),
		"sandbox disk is full", "keeps its old content", "disk_mb")
	var read struct {
		Content string `json:"content"`
	}
	callOK(t, cs, "read_file", args("path", "notes.txt"), &read)
	if read.Content != "old" {
		t.Errorf("notes.txt after the failed write: %q", read.Content)
	}
	callOK(t, cs, "run_command", args("command", "rm /tmp/fill"), nil)
	callOK(t, cs, "write_file", args("path", "notes.txt", "content", "new"), nil)
	callErr(t, cs, "create_sandbox", map[string]any{"disk_mb": 1 << 30}, "maximum")
}
