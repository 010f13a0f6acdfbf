package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/lightbearco/tupper/proto/process"
)

// TestStartCommand runs the real agent with a template's start command
// and ready check: it answers /health with 204 only once the check passed
// (startAgentArgs waits for that), lists the command under its tag, and
// writes the command's output, line by line, to its own log.
func TestStartCommand(t *testing.T) {
	dir := t.TempDir()
	start := "echo hello from the start command; echo and its stderr >&2; exec sleep 600"
	// The first try fails and leaves a mark, so that the second passes.
	ready := "[ -e tried ] || { touch tried; false; }"
	a := startAgentArgs(t, false, []string{"--start-cmd", start, "--ready-cmd", ready, "--start-user", "root", "--start-dir", dir})

	res, err := a.client.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	procs := res.Msg.GetProcesses()
	if len(procs) != 1 || procs[0].GetTag() != "start-cmd" || !slices.Equal(procs[0].GetConfig().GetArgs(), []string{"-l", "-c", start}) {
		t.Fatalf("listed %v, want the start command tagged start-cmd", procs)
	}
	if _, err := os.Stat(filepath.Join(dir, "tried")); err != nil {
		t.Errorf("the ready check did not run in %s: %v", dir, err)
	}
	pid := fmt.Sprint(procs[0].GetPid())
	if out, _ := a.run(t, "tr '\\0' ' ' </proc/"+pid+"/cmdline; readlink /proc/"+pid+"/cwd"); !strings.Contains(out, "sleep 600") || !strings.Contains(out, dir) {
		t.Errorf("the start command's process: %q, want sleep 600 in %s", out, dir)
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	logs := a.logs.String()
	for _, want := range []string{
		`msg="start-cmd: hello from the start command" stream=stdout`,
		`msg="start-cmd: and its stderr" stream=stderr`,
		"ready: the ready check passed",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the agent's log lacks %q:\n%s", want, logs)
		}
	}
}
