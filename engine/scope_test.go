package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// TestScopes checks that a call scoped to a team, or to one API key, sees
// and touches only the sandboxes its scope covers, whatever the call, and
// that what it may not see answers exactly as an unknown id.
func TestScopes(t *testing.T) {
	b := backendtest.NewFake()
	e := newEngineOn(t, b, nil)
	bg := context.Background()
	redA := WithScope(bg, Scope{Team: "red", Key: "key_a"})
	redC := WithScope(bg, Scope{Team: "red", Key: "key_c"})
	blue := WithScope(bg, Scope{Team: "blue", Key: "key_b"})
	onlyA := WithScope(bg, Scope{Team: "red", Key: "key_a", OnlyKey: true})

	create := func(ctx context.Context) *Sandbox {
		t.Helper()
		sb, err := e.Create(ctx, CreateOptions{Metadata: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	a, c, bl, op := create(redA), create(redC), create(blue), create(bg)
	for _, tc := range []struct {
		sb            *Sandbox
		team, creator string
	}{{a, "red", "key_a"}, {c, "red", "key_c"}, {bl, "blue", "key_b"}, {op, DefaultTeam, ""}} {
		if tc.sb.Team != tc.team || tc.sb.Creator != tc.creator {
			t.Errorf("%s: team %q, creator %q; want %q, %q", tc.sb.ID, tc.sb.Team, tc.sb.Creator, tc.team, tc.creator)
		}
	}

	ids := func(ctx context.Context, md map[string]string) []string {
		t.Helper()
		list, _, err := e.List(ctx, ListOptions{Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sb := range list {
			out = append(out, sb.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want []string
	}{
		{"red team", redA, sorted(a.ID, c.ID)},
		{"red team, other key", redC, sorted(a.ID, c.ID)},
		{"blue team", blue, []string{bl.ID}},
		{"one key only", onlyA, []string{a.ID}},
		{"the operator", bg, sorted(a.ID, c.ID, bl.ID, op.ID)},
		{"the default team", WithScope(bg, Scope{}), []string{op.ID}},
	} {
		t.Run("list/"+tc.name, func(t *testing.T) {
			if got := ids(tc.ctx, nil); !slices.Equal(got, tc.want) {
				t.Errorf("List = %v, want %v", got, tc.want)
			}
			if got := ids(tc.ctx, map[string]string{"k": "v"}); !slices.Equal(got, tc.want) {
				t.Errorf("List by metadata = %v, want %v", got, tc.want)
			}
		})
	}

	// Every call on another team's sandbox answers as an unknown id does,
	// word for word, and changes nothing.
	unknown := func(id string) string {
		_, err := e.Get(blue, id)
		return strings.ReplaceAll(err.Error(), id, "ID")
	}
	want := unknown("nosuchsandbox")
	calls := map[string]func(ctx context.Context, id string) error{
		"get":     func(ctx context.Context, id string) error { _, err := e.Get(ctx, id); return err },
		"connect": func(ctx context.Context, id string) error { _, err := e.Connect(ctx, id, time.Hour); return err },
		"timeout": func(ctx context.Context, id string) error { return e.SetTimeout(ctx, id, time.Hour) },
		"network": func(ctx context.Context, id string) error {
			_, err := e.UpdateNetwork(ctx, id, &netpolicy.Policy{DenyOut: []string{"0.0.0.0/0"}}, nil)
			return err
		},
		"denials": func(ctx context.Context, id string) error { _, err := e.NetworkDenials(ctx, id); return err },
		"kill":    func(ctx context.Context, id string) error { return e.Kill(ctx, id) },
	}
	for name, call := range calls {
		t.Run("foreign/"+name, func(t *testing.T) {
			for _, tc := range []struct {
				ctx context.Context
				id  string
			}{{blue, a.ID}, {onlyA, c.ID}, {redA, op.ID}} {
				err := call(tc.ctx, tc.id)
				if !errdefs.IsNotFound(err) {
					t.Fatalf("%s of a sandbox outside the scope: %v, want not found", name, err)
				}
				if got := strings.ReplaceAll(err.Error(), tc.id, "ID"); got != want {
					t.Errorf("%s of a sandbox outside the scope says %q; an unknown id says %q", name, got, want)
				}
			}
		})
	}
	if got, err := e.Get(bg, a.ID); err != nil || got.Network != nil || !got.EndAt.Equal(a.EndAt) {
		t.Errorf("the foreign calls changed sandbox a: %+v, %v", got, err)
	}
	if b.Network(a.ID) != nil {
		t.Error("the foreign network update reached the backend")
	}

	// Within the scope, every call works.
	for _, name := range []string{"get", "connect", "timeout", "network", "denials", "kill"} {
		if err := calls[name](redC, a.ID); err != nil {
			t.Errorf("%s by a key of the same team: %v", name, err)
		}
	}
	// Killed, the sandbox says why to its team only.
	if _, err := e.Get(redA, a.ID); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Get of a killed sandbox by its team: %v, want it to say killed", err)
	}
	if got := unknown(a.ID); got != want {
		t.Errorf("Get of another team's killed sandbox says %q, want %q", got, want)
	}
}

// TestReservedMetadata checks that keys under "tupper." can be neither set
// nor filtered on, by anyone.
func TestReservedMetadata(t *testing.T) {
	e := newEngineOn(t, backendtest.NewFake(), nil)
	ctx := context.Background()
	_, err := e.Create(ctx, CreateOptions{Metadata: map[string]string{"tupper.mcp.owner": "key_x"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"tupper.mcp.owner"`) || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("create with a reserved key: %v, want an invalid argument naming it", err)
	}
	if _, _, err := e.List(ctx, ListOptions{Metadata: map[string]string{"tupper.team": "x"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("list filtering on a reserved key: %v, want an invalid argument", err)
	}
	if _, err := e.Create(ctx, CreateOptions{Metadata: map[string]string{"tupperware": "ok", "my.tupper.x": "ok"}}); err != nil {
		t.Errorf("keys that only look alike: %v", err)
	}
}
