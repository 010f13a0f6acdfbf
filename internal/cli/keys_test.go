package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/auth"
)

// TestKeysTeams checks `tupper keys create --team` and that `tupper keys
// ls` tells each key's team, in the table and in JSON.
func TestKeysTeams(t *testing.T) {
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	g := &globals{root: t.TempDir(), stdout: &stdout, stderr: &stderr}
	if err := runKeysCreate(ctx, g, &keysCreateOptions{name: "laptop"}); err != nil {
		t.Fatal(err)
	}
	if err := runKeysCreate(ctx, g, &keysCreateOptions{name: "ci", team: "builds", json: true}); err != nil {
		t.Fatal(err)
	}
	var made struct{ Key, Team string }
	if err := json.Unmarshal([]byte(strings.SplitN(stdout.String(), "\n", 2)[1]), &made); err != nil || made.Team != "builds" || !strings.HasPrefix(made.Key, "e2b_") {
		t.Errorf("create --json printed %q (%v), want the key in team builds", stdout.String(), err)
	}
	if !strings.Contains(stderr.String(), `in team "default"`) {
		t.Errorf("create said %q, want the team named", stderr.String())
	}
	err := runKeysCreate(ctx, g, &keysCreateOptions{name: "bad", team: "Not A Team"})
	if err == nil || !strings.Contains(err.Error(), "team") {
		t.Errorf("create --team 'Not A Team' = %v, want an error about the team name", err)
	}

	stdout.Reset()
	if err := runKeysLs(ctx, g, &keysLsOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "TEAM") ||
		!strings.Contains(lines[1], "laptop  default") || !strings.Contains(lines[2], "ci      builds") {
		t.Errorf("keys ls printed:\n%s\nwant a TEAM column with default and builds", stdout.String())
	}
	stdout.Reset()
	if err := runKeysLs(ctx, g, &keysLsOptions{json: true}); err != nil {
		t.Fatal(err)
	}
	var keys []auth.Key
	if err := json.Unmarshal(stdout.Bytes(), &keys); err != nil || len(keys) != 2 || keys[0].Team != auth.DefaultTeam || keys[1].Team != "builds" {
		t.Errorf("keys ls --json = %s (%v)", stdout.String(), err)
	}
}
