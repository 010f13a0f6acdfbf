package mcp_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// keySession is an MCP session on rt whose calls the engine scopes to the
// API key id, as `tupper serve` scopes an HTTP session's.
func keySession(t *testing.T, rt *local.Runtime, id string) *mcpsdk.ClientSession {
	t.Helper()
	srv, err := mcp.NewServer(mcp.Config{
		Client: &sdk.Client{Transport: rt},
		Scope: func(ctx context.Context) (context.Context, error) {
			return engine.WithScope(ctx, engine.Scope{Key: id, OnlyKey: true}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mcpSession(t, srv)
}

// TestLifecycleTools pauses, resumes, snapshots and forks a real sandbox
// through the tools, as an agent would, and checks that another key's
// session can touch none of it.
func TestLifecycleTools(t *testing.T) {
	_, rt := newStackSession(t)
	cs := keySession(t, rt, "key-a")
	other := keySession(t, rt, "key-b")

	var created struct {
		Sandbox struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"sandbox"`
	}
	callOK(t, cs, "create_sandbox", nil, &created)
	id := created.Sandbox.SandboxID
	on := func(sandbox string, kv ...any) map[string]any {
		m := map[string]any{"sandbox": sandbox}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	shell := func(sandbox, command string) string {
		t.Helper()
		var run struct {
			Stdout string `json:"stdout"`
		}
		callOK(t, cs, "run_command", on(sandbox, "command", command), &run)
		return run.Stdout
	}
	count := func(sandbox string) int {
		t.Helper()
		n, _ := strconv.Atoi(strings.TrimSpace(shell(sandbox, "cat /tmp/ticks 2>/dev/null || true")))
		return n
	}
	// goesOn checks that sandbox counts on from past since and keeps
	// /tmp/kept: its processes, memory and files came back.
	goesOn := func(sandbox string, since int) {
		t.Helper()
		if got := shell(sandbox, "cat /tmp/kept"); got != "kept\n" {
			t.Errorf("%s: /tmp/kept holds %q", sandbox, got)
		}
		testutil.WaitFor(t, 20*time.Second, "the count to go on in "+sandbox, func() bool { return count(sandbox) > since })
	}
	var started struct {
		PID int `json:"pid"`
	}
	callOK(t, cs, "run_command", on(id, "command", "i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; echo tick $i; sleep 0.2; done", "background", true), &started)
	shell(id, "echo kept > /tmp/kept")
	testutil.WaitFor(t, 20*time.Second, "the counter to count", func() bool { return count(id) > 0 })

	t.Run("pause and resume", func(t *testing.T) {
		before := count(id)
		var paused struct {
			State string `json:"state"`
		}
		callOK(t, cs, "pause_sandbox", on(id), &paused)
		if paused.State != "paused" {
			t.Errorf("pause_sandbox answered state %q", paused.State)
		}
		var ls struct {
			Sandboxes []struct {
				SandboxID string `json:"sandbox_id"`
				State     string `json:"state"`
			} `json:"sandboxes"`
		}
		callOK(t, cs, "list_sandboxes", nil, &ls)
		if len(ls.Sandboxes) != 1 || ls.Sandboxes[0].State != "paused" {
			t.Errorf("list_sandboxes while paused: %+v", ls.Sandboxes)
		}
		callErr(t, cs, "pause_sandbox", on(id), "paused already")

		var resumed struct {
			Sandbox struct {
				State string `json:"state"`
			} `json:"sandbox"`
			Resumed bool `json:"resumed"`
		}
		callOK(t, cs, "resume_sandbox", on(id), &resumed)
		if !resumed.Resumed || resumed.Sandbox.State != "running" {
			t.Errorf("resume_sandbox of a paused sandbox: %+v", resumed)
		}
		goesOn(id, before)
		// The background command is followed again, not taken for ended.
		var out struct {
			Running bool   `json:"running"`
			Stdout  string `json:"stdout"`
		}
		callOK(t, cs, "command_output", on(id, "pid", started.PID, "wait_seconds", 1), &out)
		if !out.Running {
			t.Errorf("command_output after the resume: %+v, want it running", out)
		}
		callOK(t, cs, "resume_sandbox", on(id), &resumed)
		if resumed.Resumed {
			t.Error("resume_sandbox of a running sandbox says it resumed it")
		}

		// Any tool call on a paused sandbox resumes it.
		before = count(id)
		callOK(t, cs, "pause_sandbox", on(id), nil)
		goesOn(id, before)
	})

	t.Run("snapshot", func(t *testing.T) {
		var sn struct {
			SnapshotID string   `json:"snapshot_id"`
			Names      []string `json:"names"`
			SandboxID  string   `json:"sandbox_id"`
		}
		callOK(t, cs, "snapshot_sandbox", on(id, "name", "mcp-warm"), &sn)
		if !strings.HasPrefix(sn.SnapshotID, "snap-") || sn.SandboxID != id || len(sn.Names) != 1 {
			t.Fatalf("snapshot_sandbox answered %+v", sn)
		}
		callErr(t, cs, "snapshot_sandbox", on(id, "name", "mcp-warm"), "choose another name")
		callOK(t, cs, "create_sandbox", map[string]any{"template": sn.SnapshotID}, &created)
		if created.Sandbox.SandboxID == id {
			t.Fatal("create_sandbox from the snapshot answered the source's id")
		}
		goesOn(created.Sandbox.SandboxID, 0)
		callOK(t, cs, "kill_sandbox", on(created.Sandbox.SandboxID), nil)

		// Another key's session can neither delete nor use it.
		callErr(t, other, "delete_snapshot", map[string]any{"snapshot": sn.SnapshotID}, "not found")
		callOK(t, cs, "delete_snapshot", map[string]any{"snapshot": "mcp-warm"}, nil)
		callErr(t, cs, "delete_snapshot", map[string]any{"snapshot": "mcp-warm"}, "not found")
	})

	t.Run("fork", func(t *testing.T) {
		before := count(id)
		var forked struct {
			Sandboxes []struct {
				SandboxID string `json:"sandbox_id"`
				State     string `json:"state"`
				ExpiresAt string `json:"expires_at"`
			} `json:"sandboxes"`
			Errors []string `json:"errors"`
		}
		callOK(t, cs, "fork_sandbox", on(id, "count", 2), &forked)
		if len(forked.Sandboxes) != 2 || len(forked.Errors) != 0 {
			t.Fatalf("fork_sandbox of 2: %+v", forked)
		}
		seen := map[string]bool{id: true}
		for _, f := range forked.Sandboxes {
			if seen[f.SandboxID] || f.State != "running" || f.ExpiresAt == "" {
				t.Errorf("fork %+v: want a new running sandbox with an expiry", f)
			}
			seen[f.SandboxID] = true
			goesOn(f.SandboxID, before)
		}
		callErr(t, cs, "fork_sandbox", on(id, "count", -1), "must not be negative")
	})

	t.Run("other key", func(t *testing.T) {
		for _, tool := range []string{"pause_sandbox", "resume_sandbox", "snapshot_sandbox", "fork_sandbox"} {
			callErr(t, other, tool, on(id), "not found")
		}
		if got := shell(id, "echo still"); got != "still\n" {
			t.Errorf("the sandbox after another key's calls: %q", got)
		}
	})
}
