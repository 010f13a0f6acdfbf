package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// The tools of this file save sandboxes with their processes, memory and
// files: pause (and resume), snapshots and forks. Each acts only on what
// the caller may see: the sandbox is looked up through info, and Tupper
// scopes every call as it does the others.

type pauseSandboxOut struct {
	SandboxID string `json:"sandbox_id" jsonschema:"The sandbox that was paused"`
	State     string `json:"state" jsonschema:"Always paused: failures are errors"`
}

type resumeSandboxOut struct {
	Sandbox sandboxOut `json:"sandbox" jsonschema:"The sandbox, running"`
	Resumed bool       `json:"resumed" jsonschema:"True when it was paused; false when it ran already"`
}

type snapshotSandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox to snapshot"`
	Name    string `json:"name,omitempty" jsonschema:"Optional unique name to pass as template to create_sandbox instead of the id"`
}

type snapshotSandboxOut struct {
	SnapshotID string   `json:"snapshot_id" jsonschema:"Pass it as template to create_sandbox to start a sandbox from the snapshot"`
	Names      []string `json:"names,omitempty" jsonschema:"Other names create_sandbox takes for it"`
	SandboxID  string   `json:"sandbox_id" jsonschema:"The sandbox it was made of, which runs on"`
	SizeBytes  int64    `json:"size_bytes,omitempty" jsonschema:"What it takes on disk"`
}

type forkSandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox to copy"`
	Count   int    `json:"count,omitempty" jsonschema:"How many copies to start (default 1)"`
}

type forkSandboxOut struct {
	Sandboxes []sandboxOut `json:"sandboxes" jsonschema:"The copies that started"`
	Errors    []string     `json:"errors,omitempty" jsonschema:"Why each copy that did not start failed"`
}

type deleteSnapshotIn struct {
	Snapshot string `json:"snapshot" jsonschema:"Id or name of the snapshot (from snapshot_sandbox)"`
}

type deleteSnapshotOut struct {
	Snapshot string `json:"snapshot" jsonschema:"The snapshot that was deleted"`
	Deleted  bool   `json:"deleted" jsonschema:"Always true: failures are errors"`
}

func (t *tools) registerLifecycle(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "pause_sandbox",
		Title: "Pause a sandbox",
		Description: "Save a sandbox to disk with its processes, memory and files, and free its memory and CPU. " +
			"It does not expire while paused. Any tool call on it, or resume_sandbox, brings it back as it was.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no},
	}, nil, t.pauseSandbox)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "resume_sandbox",
		Title:       "Resume a sandbox",
		Description: "Resume a paused sandbox with its processes, memory and files as they were. A running one stays running.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.resumeSandbox)
	addTool(s, t, &mcpsdk.Tool{
		Name:  "snapshot_sandbox",
		Title: "Snapshot a sandbox",
		Description: "Save a sandbox as it is now (processes, memory, files) while it runs on. " +
			"create_sandbox with the snapshot's id or name as template starts new sandboxes from it. Delete it with delete_snapshot.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no},
	}, nil, t.snapshotSandbox)
	addTool(s, t, &mcpsdk.Tool{
		Name:  "fork_sandbox",
		Title: "Fork a sandbox",
		Description: "Start copies of a sandbox as it is now (processes, memory, files), each with its own id; the sandbox runs on. " +
			"Use them to try alternatives side by side.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no},
	}, nil, t.forkSandbox)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "delete_snapshot",
		Title:       "Delete a snapshot",
		Description: "Delete a snapshot made with snapshot_sandbox. Sandboxes started from it run on.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.deleteSnapshot)
}

func (t *tools) pauseSandbox(ctx context.Context, in sandboxIn) (*mcpsdk.CallToolResult, pauseSandboxOut, error) {
	var out pauseSandboxOut
	info, err := t.info(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	if info.State == "paused" {
		return nil, out, fmt.Errorf("sandbox %q is paused already: any tool call on it, or resume_sandbox, resumes it", info.SandboxID)
	}
	// The pause cuts the streams of the background commands followed
	// here; let go of them first, so that they are not taken for ended:
	// command_output attaches to them again once the sandbox is back.
	t.bg.forget(info.SandboxID)
	if err := t.client.Pause(ctx, info.SandboxID); err != nil {
		switch {
		case sdk.IsNotFound(err):
			return nil, out, errSandboxNotFound(info.SandboxID)
		case errors.Is(err, errdefs.ErrFailedPrecondition):
			return nil, out, fmt.Errorf("pause sandbox %q: %w: it is not running (paused already?): call list_sandboxes to see its state", info.SandboxID, err)
		}
		return nil, out, explain(ctx, "pause sandbox", info.SandboxID, err)
	}
	out = pauseSandboxOut{SandboxID: info.SandboxID, State: "paused"}
	return textResult("paused sandbox " + info.SandboxID + ": a tool call on it, or resume_sandbox, resumes it"), out, nil
}

func (t *tools) resumeSandbox(ctx context.Context, in sandboxIn) (*mcpsdk.CallToolResult, resumeSandboxOut, error) {
	var out resumeSandboxOut
	info, err := t.info(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	// A sandbox made here gets a full idle timeout from now; any other
	// the one it was created with.
	var idle time.Duration
	if secs, err := strconv.Atoi(info.Metadata[MetadataIdleTimeout]); err == nil && secs > 0 {
		idle = time.Duration(secs) * time.Second
	}
	if _, err := t.client.Resume(ctx, info.SandboxID, idle); err != nil {
		if sdk.IsNotFound(err) {
			return nil, out, errSandboxNotFound(info.SandboxID)
		}
		return nil, out, explain(ctx, "resume sandbox", info.SandboxID, err)
	}
	now, err := t.client.GetInfo(ctx, info.SandboxID)
	if err != nil {
		return nil, out, explain(ctx, "look up sandbox", info.SandboxID, err)
	}
	out = resumeSandboxOut{Sandbox: sandboxView(now), Resumed: info.State == "paused"}
	verb := "resumed sandbox "
	if !out.Resumed {
		verb = "sandbox runs already: "
	}
	return textResult(verb + info.SandboxID + "\n" + renderSandbox(out.Sandbox)), out, nil
}

func (t *tools) snapshotSandbox(ctx context.Context, in snapshotSandboxIn) (*mcpsdk.CallToolResult, snapshotSandboxOut, error) {
	var out snapshotSandboxOut
	info, err := t.info(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	t.keepAlive(ctx, info)
	sn, err := t.client.CreateSnapshot(ctx, info.SandboxID, strings.TrimSpace(in.Name))
	if err != nil {
		switch {
		case sdk.IsNotFound(err):
			return nil, out, errSandboxNotFound(info.SandboxID)
		case sdk.IsAlreadyExists(err) && in.Name != "":
			return nil, out, fmt.Errorf("snapshot sandbox %q: %w: choose another name", info.SandboxID, err)
		}
		return nil, out, explain(ctx, "snapshot sandbox", info.SandboxID, err)
	}
	out = snapshotSandboxOut{SnapshotID: sn.SnapshotID, Names: sn.Names, SandboxID: info.SandboxID, SizeBytes: sn.SizeBytes}
	text := fmt.Sprintf("snapshot %s of sandbox %s", sn.SnapshotID, info.SandboxID)
	if len(sn.Names) > 0 {
		text += " named " + strings.Join(sn.Names, ", ")
	}
	text += fmt.Sprintf("\nstart a sandbox from it: create_sandbox with template %q", sn.SnapshotID)
	return textResult(text), out, nil
}

func (t *tools) forkSandbox(ctx context.Context, in forkSandboxIn) (*mcpsdk.CallToolResult, forkSandboxOut, error) {
	out := forkSandboxOut{Sandboxes: []sandboxOut{}}
	if in.Count < 0 {
		return nil, out, errArgument("count must not be negative")
	}
	count := max(in.Count, 1)
	info, err := t.info(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	t.keepAlive(ctx, info)
	// The copies keep the source's labels, its idle timeout among them,
	// and live that long.
	results, err := t.client.Fork(ctx, info.SandboxID, count, 0)
	if err != nil {
		if sdk.IsNotFound(err) {
			return nil, out, errSandboxNotFound(info.SandboxID)
		}
		return nil, out, explain(ctx, "fork sandbox", info.SandboxID, err)
	}
	var b strings.Builder
	for i, res := range results {
		if res.Err != nil {
			msg := fmt.Sprintf("copy %d of %d: %v", i+1, len(results), res.Err)
			out.Errors = append(out.Errors, msg)
			fmt.Fprintf(&b, "%s\n", msg)
			continue
		}
		forked := res.Sandbox.Info()
		if forked.EndAt.IsZero() {
			// A fork over HTTP answers no times (nor does E2B's).
			if full, err := t.client.GetInfo(ctx, forked.SandboxID); err == nil {
				forked = *full
			}
		}
		view := sandboxView(&forked)
		out.Sandboxes = append(out.Sandboxes, view)
		fmt.Fprintf(&b, "forked sandbox %s\n", renderSandbox(view))
	}
	return textResult(strings.TrimSuffix(b.String(), "\n")), out, nil
}

func (t *tools) deleteSnapshot(ctx context.Context, in deleteSnapshotIn) (*mcpsdk.CallToolResult, deleteSnapshotOut, error) {
	var out deleteSnapshotOut
	ref := strings.TrimSpace(in.Snapshot)
	if ref == "" {
		return nil, out, errArgument("snapshot is empty: pass an id or name from snapshot_sandbox")
	}
	if err := t.client.DeleteSnapshot(ctx, ref); err != nil {
		if sdk.IsNotFound(err) || sdk.IsInvalidArgument(err) {
			return nil, out, fmt.Errorf("snapshot %q not found: pass an id or name that snapshot_sandbox returned", ref)
		}
		return nil, out, explain(ctx, "delete snapshot", "", err)
	}
	out = deleteSnapshotOut{Snapshot: ref, Deleted: true}
	return textResult("deleted snapshot " + ref), out, nil
}
