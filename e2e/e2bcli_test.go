package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestE2BCLILifecycle drives the published @e2b/cli (e2b/package.json
// pins it) against a real `tupper serve`, as its users type it: `sandbox
// pause` and `resume`, `sandbox list --state paused`, `sandbox snapshot
// create`, `list` and `delete`, and `template list` after a template was
// built.
func TestE2BCLILifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	d := startServeDaemon(t, "--build-egress", "deny")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := goClient(t, d)
	sb, err := client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	mustRun(ctx, t, sb, "echo kept > /tmp/kept")

	e2bCLI(ctx, t, node, dir, d, "sandbox", "pause", sb.ID())
	if info, err := client.GetInfo(ctx, sb.ID()); err != nil || info.State != "paused" {
		t.Fatalf("after `e2b sandbox pause`: %+v, %v", info, err)
	}
	listed := e2bCLI(ctx, t, node, dir, d, "sandbox", "list", "--state", "paused", "--format", "json")
	if !strings.Contains(listed, sb.ID()) {
		t.Errorf("`e2b sandbox list --state paused` lacks %s:\n%s", sb.ID(), listed)
	}
	e2bCLI(ctx, t, node, dir, d, "sandbox", "resume", sb.ID())
	again, err := client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRun(ctx, t, again, "cat /tmp/kept"); out != "kept\n" {
		t.Errorf("after `e2b sandbox resume`: %q", out)
	}

	out := e2bCLI(ctx, t, node, dir, d, "sandbox", "snapshot", "create", sb.ID())
	snaps, _, err := client.ListSnapshots(ctx, sdk.SnapshotListOptions{SandboxID: sb.ID()})
	if err != nil || len(snaps) != 1 || !strings.Contains(out, snaps[0].SnapshotID) {
		t.Fatalf("`e2b sandbox snapshot create` printed %q; snapshots %+v, %v", out, snaps, err)
	}
	id := snaps[0].SnapshotID
	if out := e2bCLI(ctx, t, node, dir, d, "sandbox", "snapshot", "list", "--format", "json"); !strings.Contains(out, id) {
		t.Errorf("`e2b sandbox snapshot list` lacks %s:\n%s", id, out)
	}
	e2bCLI(ctx, t, node, dir, d, "sandbox", "snapshot", "delete", id)
	if snaps, _, err := client.ListSnapshots(ctx, sdk.SnapshotListOptions{}); err != nil || len(snaps) != 0 {
		t.Errorf("after `e2b sandbox snapshot delete`: %+v, %v", snaps, err)
	}

	// A template to list: built through the API as the SDK builds one.
	name := "cli-listed-" + randomHex(t)[:8]
	tpl := buildTemplateByAPI(ctx, t, d, name)
	var templates []struct {
		TemplateID string   `json:"templateID"`
		Aliases    []string `json:"aliases"`
	}
	out = e2bCLI(ctx, t, node, dir, d, "template", "list", "--format", "json")
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &templates); err != nil {
		t.Fatalf("`e2b template list --format json`: %v\n%s", err, out)
	}
	found := false
	for _, x := range templates {
		found = found || x.TemplateID == tpl && len(x.Aliases) == 1 && x.Aliases[0] == name
	}
	if !found {
		t.Errorf("`e2b template list` lacks %s (%s):\n%s", name, tpl, out)
	}
	if pretty := e2bCLI(ctx, t, node, dir, d, "template", "list"); !strings.Contains(pretty, name) {
		t.Errorf("`e2b template list` (table) lacks %s:\n%s", name, pretty)
	}
}

// buildTemplateByAPI builds a one-step template called name from the
// base template through the template routes, waits for it, and returns its
// id.
func buildTemplateByAPI(ctx context.Context, t *testing.T, d *serveDaemon, name string) string {
	t.Helper()
	var req struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	d.apiJSON(ctx, t, "POST", "/v3/templates", map[string]any{"name": name}, &req)
	d.apiJSON(ctx, t, "POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID,
		map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN", "args": []string{"echo ok > /tmp/built"}}}}, nil)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var st struct {
			Status string `json:"status"`
		}
		d.apiJSON(ctx, t, "GET", "/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", nil, &st)
		switch st.Status {
		case "ready":
			return req.TemplateID
		case "error":
			t.Fatalf("template build of %s failed", name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("template build of %s: still %s after 2 minutes", name, st.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiJSON is api for a request that must succeed (2xx), decoding the
// answer into out when out is not nil.
func (d *serveDaemon) apiJSON(ctx context.Context, t *testing.T, method, path string, body, out any) {
	t.Helper()
	status, data, err := d.api(ctx, method, path, body)
	if err != nil || status/100 != 2 {
		t.Fatalf("%s %s: %d %s (%v)", method, path, status, data, err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}
