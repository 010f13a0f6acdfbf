package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTeamsPauseAndSnapshots checks, against a real `tupper serve` on
// runsc, that an API key of another team gets, on every route of pauses,
// snapshots, forks, logs and metrics, what it gets for an unknown sandbox
// or snapshot, touching nothing: it neither pauses, resumes, snapshots,
// forks nor reads the logs and metrics of a team's sandbox, running or
// paused, neither lists, starts from (by id or name) nor deletes the
// team's snapshots, and a request of its key on the data plane does not
// wake a paused sandbox created with autoResume. Snapshot names are each
// team's own: the other team's snapshot of the same name starts its own.
func TestTeamsPauseAndSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	d := startServeDaemon(t)
	blue := d.addKey(t, "--team", "blue", "--name", "blue")
	as := func(key string) *serveDaemon { k := *d; k.Key = key; return &k }
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	call := func(key, method, path string, body any) (int, string) {
		t.Helper()
		status, data, err := as(key).api(ctx, method, path, body)
		if err != nil {
			t.Fatal(err)
		}
		return status, string(data)
	}
	create := func(key string, body map[string]any) map[string]any {
		t.Helper()
		status, data := call(key, http.MethodPost, "/sandboxes", body)
		if status != http.StatusCreated {
			t.Fatalf("create %v: %d %s", body, status, data)
		}
		var sb map[string]any
		json.Unmarshal([]byte(data), &sb)
		return sb
	}
	// who marks a sandbox's files as its team's, for the sandboxes
	// started from its snapshots to show.
	who := func(sb map[string]any, team string) string {
		t.Helper()
		id := sb["sandboxID"].(string)
		if status, body := uploadRaw(ctx, t, d, id, sb["envdAccessToken"].(string), "/home/user/who", strings.NewReader(team)); status != http.StatusOK {
			t.Fatalf("mark %s: %d %s", id, status, body)
		}
		return id
	}
	running := who(create(d.Key, map[string]any{"timeout": 300}), "default")
	paused := create(d.Key, map[string]any{"timeout": 300, "autoPause": true, "autoResume": true})
	pausedID, pausedToken := paused["sandboxID"].(string), paused["envdAccessToken"].(string)
	if status, data := call(d.Key, http.MethodPost, "/sandboxes/"+pausedID+"/pause", map[string]any{}); status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", status, data)
	}
	const name = "team-snapshot"
	status, data := call(d.Key, http.MethodPost, "/sandboxes/"+running+"/snapshots", map[string]any{"name": name})
	if status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", status, data)
	}
	var snap struct {
		SnapshotID string `json:"snapshotID"`
	}
	json.Unmarshal([]byte(data), &snap)

	// Every route, on the team's sandboxes and snapshot, answers blue as
	// it answers for ids that do not exist.
	const unknownSandbox, unknownSnapshot = "nosuchsandbox0000000", "snap-nosuchsnapshot0000"
	same := func(what string, status int, body string, wantStatus int, wantBody, id, unknown string) {
		t.Helper()
		if status != wantStatus || strings.ReplaceAll(body, id, "ID") != strings.ReplaceAll(wantBody, unknown, "ID") {
			t.Errorf("blue: %s: %d %s; for an unknown id: %d %s", what, status, body, wantStatus, wantBody)
		}
	}
	for _, id := range []string{running, pausedID} {
		for _, rt := range []struct{ method, path string }{
			{http.MethodPost, "/sandboxes/%s/pause"},
			{http.MethodPost, "/sandboxes/%s/resume"},
			{http.MethodPost, "/sandboxes/%s/connect"},
			{http.MethodPost, "/v2/sandboxes/%s/connect"},
			{http.MethodPost, "/sandboxes/%s/snapshots"},
			{http.MethodPost, "/sandboxes/%s/fork"},
			{http.MethodGet, "/sandboxes/%s/logs"},
			{http.MethodGet, "/v2/sandboxes/%s/logs"},
			{http.MethodGet, "/sandboxes/%s/metrics"},
		} {
			body := map[string]any{"timeout": 60}
			wantStatus, wantBody := call(blue, rt.method, fmt.Sprintf(rt.path, unknownSandbox), body)
			status, got := call(blue, rt.method, fmt.Sprintf(rt.path, id), body)
			same(rt.method+" "+fmt.Sprintf(rt.path, id), status, got, wantStatus, wantBody, id, unknownSandbox)
		}
	}
	for _, ref := range []string{snap.SnapshotID, name} {
		wantStatus, wantBody := call(blue, http.MethodPost, "/sandboxes", map[string]any{"templateID": unknownSnapshot})
		status, got := call(blue, http.MethodPost, "/sandboxes", map[string]any{"templateID": ref})
		same("create from "+ref, status, got, wantStatus, wantBody, ref, unknownSnapshot)
		wantStatus, wantBody = call(blue, http.MethodDelete, "/templates/"+unknownSnapshot, nil)
		status, got = call(blue, http.MethodDelete, "/templates/"+ref, nil)
		same("DELETE /templates/"+ref, status, got, wantStatus, wantBody, ref, unknownSnapshot)
	}
	for _, q := range []string{"", "?sandboxID=" + running, "?name=" + name} {
		if status, got := call(blue, http.MethodGet, "/snapshots"+q, nil); status != http.StatusOK || strings.TrimSpace(got) != "[]" {
			t.Errorf("blue: GET /snapshots%s: %d %s, want none", q, status, got)
		}
	}

	// The paused sandbox stays paused: neither blue's calls nor a data
	// plane request with blue's key (which would resume it) woke it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/envs", nil)
	req.Header.Set("E2b-Sandbox-Id", pausedID)
	req.Header.Set("X-Access-Token", pausedToken)
	req.Header.Set("X-API-KEY", blue)
	if resp, err := d.http.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("blue's key on the paused sandbox's data plane: %s, want 502 as for an unknown one", resp.Status)
		}
	}
	status, data = call(d.Key, http.MethodGet, "/sandboxes/"+pausedID, nil)
	if status != http.StatusOK || !strings.Contains(data, `"state":"paused"`) {
		t.Errorf("the paused sandbox after blue's tries: %d %s", status, data)
	}
	if status, data := call(d.Key, http.MethodGet, "/snapshots?name="+name, nil); status != http.StatusOK || !strings.Contains(data, snap.SnapshotID) {
		t.Errorf("the team's snapshot after blue's tries: %d %s", status, data)
	}

	// Names are the team's: blue's snapshot of the same name is its own,
	// and each team starts from its own.
	blueSrc := who(create(blue, map[string]any{"timeout": 300}), "blue")
	if status, data := call(blue, http.MethodPost, "/sandboxes/"+blueSrc+"/snapshots", map[string]any{"name": name}); status != http.StatusCreated {
		t.Fatalf("blue's snapshot named as the team's: %d %s", status, data)
	}
	for key, team := range map[string]string{d.Key: "default", blue: "blue"} {
		sb := create(key, map[string]any{"templateID": name, "timeout": 60})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/files?path=/home/user/who", nil)
		req.Header.Set("E2b-Sandbox-Id", sb["sandboxID"].(string))
		req.Header.Set("X-Access-Token", sb["envdAccessToken"].(string))
		resp, err := d.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != team {
			t.Errorf("%s's sandbox from the snapshot named %s holds the files of %q, want its own team's", team, name, got)
		}
	}
}
