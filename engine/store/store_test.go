package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tupper.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestPutGetSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	want := &Sandbox{
		ID: "abc", Backend: "gvisor", Team: "red", Creator: "key_1", TemplateID: "base", State: StateRunning,
		Metadata: map[string]string{"owner": "me"}, Env: map[string]string{"A": "1"},
		CPUs: 1, MemoryMB: 512, AgentAddr: "10.213.0.2:49983", AccessToken: "tok",
		StartedAt: start, EndAt: start.Add(time.Minute),
	}
	if err := s.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Get(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("record after reopen (-want +got):\n%s", d)
	}
}

func TestGetMissing(t *testing.T) {
	s, _ := openTemp(t)
	_, err := s.Get(context.Background(), "nope")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := s.Delete(context.Background(), "nope"); err != nil {
		t.Fatalf("Delete(missing) = %v, want nil", err)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	base := time.Now()
	for i := range 7 {
		sb := &Sandbox{
			ID: fmt.Sprintf("sb%d", i), State: StateRunning,
			Metadata:  map[string]string{"team": []string{"a", "b"}[i%2]},
			StartedAt: base.Add(time.Duration(i) * time.Second),
		}
		if i == 6 {
			sb.State = StateKilled
		}
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		q     Query
		pages [][]string
	}{
		{"all", Query{}, [][]string{{"sb0", "sb1", "sb2", "sb3", "sb4", "sb5", "sb6"}}},
		{"running only", Query{States: []string{StateRunning}}, [][]string{{"sb0", "sb1", "sb2", "sb3", "sb4", "sb5"}}},
		{"metadata", Query{Metadata: map[string]string{"team": "a"}, States: []string{StateRunning}}, [][]string{{"sb0", "sb2", "sb4"}}},
		{"pages of 2", Query{Limit: 2, Metadata: map[string]string{"team": "a"}}, [][]string{{"sb0", "sb2"}, {"sb4", "sb6"}}},
		{"pages of 3", Query{Limit: 3}, [][]string{{"sb0", "sb1", "sb2"}, {"sb3", "sb4", "sb5"}, {"sb6"}}},
		{"no match", Query{Metadata: map[string]string{"team": "z"}}, [][]string{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][]string
			q := tt.q
			for {
				page, next, err := s.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, sb := range page {
					ids = append(ids, sb.ID)
				}
				got = append(got, ids)
				if next == "" {
					break
				}
				q.After = next
			}
			if d := cmp.Diff(tt.pages, got); d != "" {
				t.Errorf("pages (-want +got):\n%s", d)
			}
		})
	}
}

func TestListBadToken(t *testing.T) {
	s, _ := openTemp(t)
	_, _, err := s.List(context.Background(), Query{After: "%%%"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("List(bad token) = %v, want ErrInvalidArgument", err)
	}
}

func TestDeleteKilledStartedBefore(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	old := time.Now().Add(-72 * time.Hour)
	for _, sb := range []*Sandbox{
		{ID: "old-killed", State: StateKilled, StartedAt: old},
		{ID: "old-running", State: StateRunning, StartedAt: old},
		{ID: "new-killed", State: StateKilled, StartedAt: time.Now()},
	} {
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.DeleteKilledStartedBefore(ctx, time.Now().Add(-48*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("DeleteKilledStartedBefore = %d, %v; want 1", n, err)
	}
	all, _, err := s.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range all {
		ids = append(ids, sb.ID)
	}
	if d := cmp.Diff([]string{"old-running", "new-killed"}, ids); d != "" {
		t.Errorf("left (-want +got):\n%s", d)
	}
}

// TestCloneIsDeep checks that a clone shares nothing a caller could change
// with its original, field by field through JSON, so that a field added
// later is covered too.
func TestCloneIsDeep(t *testing.T) {
	yes := true
	sb := &Sandbox{
		ID: "a", Metadata: map[string]string{"k": "v"}, Env: map[string]string{"E": "1"},
		Network:             &netpolicy.Policy{AllowOut: []string{"example.com"}},
		AllowInternetAccess: &yes, Secure: &yes,
	}
	c := sb.Clone()
	before, _ := json.Marshal(sb)
	if got, _ := json.Marshal(c); string(got) != string(before) {
		t.Fatalf("clone %s differs from %s", got, before)
	}
	c.Metadata["k"], c.Env["E"], c.Network.AllowOut[0], *c.AllowInternetAccess, *c.Secure = "x", "x", "x", false, false
	if after, _ := json.Marshal(sb); string(after) != string(before) {
		t.Errorf("changing the clone changed the original: %s, was %s", after, before)
	}
}

func TestListByOwner(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i, o := range []struct{ team, creator string }{{"red", "key_a"}, {"red", "key_b"}, {"blue", "key_c"}, {"", ""}} {
		sb := &Sandbox{ID: fmt.Sprint("s", i), Team: o.team, Creator: o.creator, State: StateRunning, StartedAt: start.Add(time.Duration(i) * time.Second)}
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		q    Query
		want []string
	}{
		{name: "every team", q: Query{}, want: []string{"s0", "s1", "s2", "s3"}},
		{name: "one team", q: Query{Team: "red"}, want: []string{"s0", "s1"}},
		{name: "one creator", q: Query{Team: "red", Creator: "key_b"}, want: []string{"s1"}},
		{name: "no team named is the default one", q: Query{Team: DefaultTeam}, want: []string{"s3"}},
		{name: "another team's creator", q: Query{Team: "blue", Creator: "key_a"}, want: nil},
		{name: "a page", q: Query{Team: "red", Limit: 1}, want: []string{"s0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, _, err := s.List(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sb := range list {
				ids = append(ids, sb.ID)
				if sb.Team == "" {
					t.Errorf("%s has no team", sb.ID)
				}
			}
			if d := cmp.Diff(tc.want, ids); d != "" {
				t.Errorf("ids (-want +got):\n%s", d)
			}
		})
	}
}

// TestMigrateOwners opens a database written before sandboxes had owners:
// its records belong to the default team, an MCP owner kept in metadata
// becomes the creator, and no Tupper key is left in the metadata.
func TestMigrateOwners(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tupper.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(schema); err != nil {
		t.Fatal(err)
	}
	for id, md := range map[string]string{
		"mcp":   `{"project":"p","tupper.mcp.owner":"key_0a1b","tupper.mcp.idle-timeout":"600"}`,
		"local": `{"tupper.mcp.owner":"local"}`,
		"rest":  `{"project":"q"}`,
	} {
		data := fmt.Sprintf(`{"id":%q,"state":"running","metadata":%s,"startedAt":"2026-11-29T10:00:00Z"}`, id, md)
		if _, err := old.Exec(`INSERT INTO sandboxes(id, state, started_ns, data) VALUES(?, 'running', 1, ?)`, id, data); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	for range 2 { // the second open finds it migrated
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			creator string
			md      map[string]string
		}{
			"mcp":   {"key_0a1b", map[string]string{"project": "p"}},
			"local": {"", nil},
			"rest":  {"", map[string]string{"project": "q"}},
		}
		for id, w := range want {
			sb, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.Team != DefaultTeam || sb.Creator != w.creator {
				t.Errorf("%s: team %q, creator %q; want %q, %q", id, sb.Team, sb.Creator, DefaultTeam, w.creator)
			}
			if d := cmp.Diff(w.md, sb.Metadata); d != "" {
				t.Errorf("%s: metadata (-want +got):\n%s", id, d)
			}
		}
		if list, _, err := s.List(ctx, Query{Team: DefaultTeam, Creator: "key_0a1b"}); err != nil || len(list) != 1 || list[0].ID != "mcp" {
			t.Errorf("List by the migrated creator = %v, %v", list, err)
		}
		s.Close()
	}
}

// TestWritesOutliveTheirCallersCancel checks that a write's answer tells
// the truth whatever its caller's context does: writes cancelled before,
// and while, they run either land and say so, never say they failed while
// the record is there. A create that a leaving client cancelled once left
// a "creating" record behind that way, one nothing cleaned up.
func TestWritesOutliveTheirCallersCancel(t *testing.T) {
	s, _ := openTemp(t)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(gone, &Sandbox{ID: "before", State: StateCreating}); err != nil {
		t.Fatalf("Put with a cancelled context: %v", err)
	}
	if _, err := s.Get(context.Background(), "before"); err != nil {
		t.Errorf("the record Put with a cancelled context: %v", err)
	}
	// Cancels landing at every moment of many writes: each write that
	// says it failed has left no record.
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		id := fmt.Sprintf("racing-%d", i)
		go cancel()
		err := s.Put(ctx, &Sandbox{ID: id, State: StateCreating})
		_, gerr := s.Get(context.Background(), id)
		if err != nil && gerr == nil {
			t.Fatalf("Put of %s said %v, yet its record is there", id, err)
		}
		if err == nil && gerr != nil {
			t.Fatalf("Put of %s succeeded, yet Get says %v", id, gerr)
		}
	}
	if err := s.Delete(gone, "before"); err != nil {
		t.Fatalf("Delete with a cancelled context: %v", err)
	}
	if _, err := s.Get(context.Background(), "before"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the record Deleted with a cancelled context: %v", err)
	}
}
