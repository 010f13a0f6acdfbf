package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// startCmdImages holds the base image and "web", whose template has a
// start command and ready check, with labels.
func startCmdImages(t *testing.T, labels map[string]string) namedImages {
	return namedImages{
		image.BaseTemplate: {ID: "sha256:base", RootFS: t.TempDir()},
		"web":              {ID: "sha256:web", RootFS: t.TempDir(), Config: image.ImageConfig{Labels: labels}},
	}
}

// TestStartCommandReachesTheAgent: the labels of a template's start
// command become the agent's flags, and the record keeps them.
func TestStartCommandReachesTheAgent(t *testing.T) {
	b := backendtest.NewFake()
	imgs := startCmdImages(t, map[string]string{
		image.LabelStartCmd: "python3 -m http.server 8000", image.LabelReadyCmd: `[ -n "$(ss -Htuln sport = :8000)" ]`,
		image.LabelStartUser: "app", image.LabelStartWorkdir: "/srv/app",
	})
	e := newEngineOn(t, b, func(c *Config) { c.Images = imgs })
	ctx := context.Background()

	sb, err := e.Create(ctx, CreateOptions{Template: "web"})
	if err != nil {
		t.Fatal(err)
	}
	args := b.Spec(sb.ID).Agent.Args
	for _, pair := range [][2]string{
		{"--start-cmd", "python3 -m http.server 8000"}, {"--ready-cmd", `[ -n "$(ss -Htuln sport = :8000)" ]`},
		{"--start-user", "app"}, {"--start-dir", "/srv/app"},
	} {
		if i := slices.Index(args, pair[0]); i < 0 || i+1 >= len(args) || args[i+1] != pair[1] {
			t.Errorf("agent args %q lack %s %q", args, pair[0], pair[1])
		}
	}
	got, err := e.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.StartCmd != "python3 -m http.server 8000" || got.StartUser != "app" || got.StartDir != "/srv/app" || got.ReadyCmd == "" {
		t.Errorf("stored record: start %q, ready %q, user %q, dir %q", got.StartCmd, got.ReadyCmd, got.StartUser, got.StartDir)
	}

	plain, err := e.Create(ctx, CreateOptions{Template: image.BaseTemplate})
	if err != nil {
		t.Fatal(err)
	}
	if args := b.Spec(plain.ID).Agent.Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--start") || a == "--ready-cmd" }) {
		t.Errorf("a template without a start command: agent args %q", args)
	}
}

// TestStartCommandFailure: an agent that says its start command failed
// (500 with a message) fails the create at once with that message,
// leaving nothing; one that still waits when the boot time is up fails
// it with what it waits for; a label the agent cannot take fails it
// before anything boots.
func TestStartCommandFailure(t *testing.T) {
	const (
		waiting = `waiting for the ready check "curl localhost:8000" to pass; its output ends with "Traceback..."`
		failed  = `the start command "python3 app.py" ended (exit status 1) before the ready check "curl localhost:8000" passed`
	)
	// failAfter answers 503 with waiting, and 500 with failed from its
	// third call on (never when it is 0).
	agent := func(failAfter int32) http.Handler {
		var calls atomic.Int32
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if n := calls.Add(1); failAfter > 0 && n >= failAfter {
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(`{"code":500,"message":` + quoteJSON(failed) + `,"exitCode":1}`))
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":503,"message":` + quoteJSON(waiting) + `}`))
		})
	}
	tests := []struct {
		name      string
		labels    map[string]string
		agent     http.Handler
		wantClass error
		want      string
		booted    bool
	}{
		{
			name:      "start command failed",
			labels:    map[string]string{image.LabelStartCmd: "python3 app.py", image.LabelReadyCmd: "curl localhost:8000"},
			agent:     agent(3),
			wantClass: errdefs.ErrFailedPrecondition,
			want:      failed,
			booted:    true,
		},
		{
			name:      "not ready in time",
			labels:    map[string]string{image.LabelStartCmd: "python3 app.py", image.LabelReadyCmd: "curl localhost:8000"},
			agent:     agent(0),
			wantClass: errdefs.ErrDeadlineExceeded,
			want:      "not ready within the boot timeout (500ms): " + waiting,
			booted:    true,
		},
		{
			name:      "a NUL byte in a label",
			labels:    map[string]string{image.LabelStartCmd: "echo a\x00b"},
			wantClass: errdefs.ErrFailedPrecondition,
			want:      image.LabelStartCmd,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := backendtest.NewFake()
			b.Handler = tt.agent
			e := newEngineOn(t, b, func(c *Config) {
				c.Images, c.BootTimeout = startCmdImages(t, tt.labels), 500*time.Millisecond
			})
			_, err := e.Create(context.Background(), CreateOptions{Template: "web"})
			if !errors.Is(err, tt.wantClass) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("create: %v, want %v with %q", err, tt.wantClass, tt.want)
			}
			if stopped := b.Stopped(); tt.booted != (len(stopped) == 1) {
				t.Errorf("the backend stopped %v", stopped)
			}
			held, _ := b.List(context.Background())
			recs, _, _ := e.store.List(context.Background(), store.Query{})
			if len(held) != 0 || len(recs) != 0 || len(e.Running()) != 0 {
				t.Errorf("after the failed create: the backend holds %v, the store %d records, the engine runs %v", held, len(recs), e.Running())
			}
		})
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
