package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// TestCheckpointWire checks what the HTTP transport sends for pause,
// snapshots, fork and a create's lifecycle, and how it reads the answers,
// against a fake control plane that answers as E2B's API does;
// snapshots_remote_test.go runs the same calls against the real server.
func TestCheckpointWire(t *testing.T) {
	created := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	f, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "POST /v2/sandboxes":
			writeJSON(w, http.StatusCreated, map[string]any{"templateID": "base", "sandboxID": "sb1", "clientID": "c", "envdVersion": "0.5.7"})
		case "POST /sandboxes/sb1/pause":
			w.WriteHeader(http.StatusNoContent)
		case "POST /sandboxes/paused/pause":
			writeJSON(w, http.StatusConflict, map[string]any{"code": 409, "message": "sandbox paused is paused, not running"})
		case "POST /sandboxes/sb1/snapshots":
			writeJSON(w, http.StatusCreated, map[string]any{"snapshotID": "snap-1", "names": []string{"warm"}, "sandboxID": "sb1", "createdAt": created, "sizeBytes": 4096})
		case "GET /snapshots":
			w.Header().Set("X-Next-Token", "n2")
			writeJSON(w, http.StatusOK, []map[string]any{{"snapshotID": "snap-1", "names": []string{}}})
		case "DELETE /templates/warm":
			w.WriteHeader(http.StatusNoContent)
		case "POST /sandboxes/sb1/fork":
			writeJSON(w, http.StatusOK, []map[string]any{
				{"sandbox": map[string]any{"templateID": "base", "sandboxID": "f1", "clientID": "c", "envdVersion": "0.5.7", "envdAccessToken": "tokf1"}},
				{"error": map[string]any{"code": 429, "message": "too many sandboxes"}},
			})
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "no such endpoint"})
		}
	})
	ctx := context.Background()

	info, err := tr.CreateSandbox(ctx, sdk.CreateRequest{AutoPause: true, AutoResume: true})
	if err != nil || info.State != "running" {
		t.Fatalf("create = %+v, %v; want a running sandbox", info, err)
	}
	if _, err := tr.CreateSandbox(ctx, sdk.CreateRequest{AutoPause: true, AutoPauseMemory: new(bool)}); err != nil {
		t.Fatal(err)
	}
	if err := tr.PauseSandbox(ctx, "sb1", true); err != nil {
		t.Fatal(err)
	}
	if err := tr.PauseSandbox(ctx, "sb1", false); err != nil {
		t.Fatal(err)
	}
	// The pause route's 409 means "not running", not "exists".
	if err := tr.PauseSandbox(ctx, "paused", true); !errors.Is(err, errdefs.ErrFailedPrecondition) || sdk.IsAlreadyExists(err) {
		t.Errorf("pause of a paused sandbox = %v, want a failed precondition only", err)
	}
	sn, err := tr.CreateSnapshot(ctx, "sb1", "warm")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&sdk.SnapshotInfo{SnapshotID: "snap-1", Names: []string{"warm"}, SandboxID: "sb1", CreatedAt: created, SizeBytes: 4096}, sn); d != "" {
		t.Errorf("snapshot (-want +got):\n%s", d)
	}
	if _, err := tr.CreateSnapshot(ctx, "sb1", ""); err != nil {
		t.Fatal(err)
	}
	page, err := tr.ListSnapshots(ctx, sdk.SnapshotQuery{SandboxID: "sb1", Name: "warm", Limit: 5, NextToken: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&sdk.SnapshotPage{NextToken: "n2", Snapshots: []sdk.SnapshotInfo{{SnapshotID: "snap-1", Names: []string{}}}}, page); d != "" {
		t.Errorf("snapshot page (-want +got):\n%s", d)
	}
	if err := tr.DeleteSnapshot(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := tr.DeleteSnapshot(ctx, "a/b"); !sdk.IsNotFound(err) {
		t.Errorf("delete of an unknown snapshot = %v, want not found", err)
	}
	forks, err := tr.ForkSandbox(ctx, "sb1", 2, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 || forks[0].Err != nil || forks[0].Info.SandboxID != "f1" || forks[0].Info.State != "running" || forks[0].Info.EnvdAccessToken != "tokf1" {
		t.Fatalf("fork = %+v, want f1 then an error", forks)
	}
	if !sdk.IsResourceExhausted(forks[1].Err) || forks[1].Info != nil {
		t.Errorf("the failed fork = %+v, want a resource-exhausted error", forks[1])
	}
	// The fork's sandbox is known: its data plane needs no lookup.
	if dp, err := tr.DataPlane(ctx, "f1"); err != nil || dp.AccessToken != "tokf1" {
		t.Errorf("DataPlane(f1) = %+v, %v; want token tokf1", dp, err)
	}
	if _, err := tr.ForkSandbox(ctx, "sb1", 1, 0); err != nil {
		t.Fatal(err)
	}

	want := []recorded{
		{Method: "POST", Path: "/v2/sandboxes", Body: map[string]any{"autoPause": true, "autoResume": map[string]any{"enabled": true}}},
		{Method: "POST", Path: "/v2/sandboxes", Body: map[string]any{"autoPause": true, "autoPauseMemory": false}},
		{Method: "POST", Path: "/sandboxes/sb1/pause", Body: map[string]any{"memory": true}},
		{Method: "POST", Path: "/sandboxes/sb1/pause", Body: map[string]any{"memory": false}},
		{Method: "POST", Path: "/sandboxes/paused/pause", Body: map[string]any{"memory": true}},
		{Method: "POST", Path: "/sandboxes/sb1/snapshots", Body: map[string]any{"name": "warm"}},
		{Method: "POST", Path: "/sandboxes/sb1/snapshots", Body: map[string]any{}},
		{Method: "GET", Path: "/snapshots", Query: url.Values{"sandboxID": {"sb1"}, "name": {"warm"}, "limit": {"5"}, "nextToken": {"n1"}}},
		{Method: "DELETE", Path: "/templates/warm"},
		{Method: "DELETE", Path: "/templates/a%2Fb"},
		{Method: "POST", Path: "/sandboxes/sb1/fork", Body: map[string]any{"count": 2.0, "timeout": 90.0}},
		{Method: "POST", Path: "/sandboxes/sb1/fork", Body: map[string]any{"count": 1.0}},
	}
	got := f.requests()
	for i := range got {
		got[i].Key = ""
		if len(got[i].Query) == 0 {
			got[i].Query = nil
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
}

// TestCheckpointNotSupported checks that a transport without the ability
// says so in the error class the docs promise.
func TestCheckpointNotSupported(t *testing.T) {
	c := &sdk.Client{Transport: plainTransport{}}
	ctx := context.Background()
	checks := map[string]error{
		"pause":  c.Pause(ctx, "sb"),
		"delete": c.DeleteSnapshot(ctx, "snap"),
	}
	_, checks["snapshot"] = c.CreateSnapshot(ctx, "sb", "")
	_, _, checks["list"] = c.ListSnapshots(ctx, sdk.SnapshotListOptions{})
	_, checks["fork"] = c.Fork(ctx, "sb", 1, 0)
	for name, err := range checks {
		if !errors.Is(err, errdefs.ErrNotSupported) {
			t.Errorf("%s through a transport that cannot save sandboxes = %v, want not supported", name, err)
		}
	}
}

// plainTransport is a Transport with none of the optional abilities; its
// calls are never made.
type plainTransport struct{ sdk.Transport }
