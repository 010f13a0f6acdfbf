package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestLifecycleFlagsRefused checks the flags of pause, resume, fork and
// create's lifecycle that are refused before any request is made.
func TestLifecycleFlagsRefused(t *testing.T) {
	clearAPIEnv(t)
	// Nothing listens here: a run that got as far as a request would fail
	// with "cannot reach" instead.
	api := apiOptions{url: "http://127.0.0.1:1"}
	tests := []struct {
		name string
		run  func(context.Context, *globals) error
		want string
	}{
		{name: "unknown on-timeout", want: "want kill or pause", run: func(ctx context.Context, g *globals) error {
			return runCreate(ctx, g, &createOptions{api: api, onTimeout: "sleep"})
		}},
		{name: "auto-resume without pause", want: "needs --on-timeout pause", run: func(ctx context.Context, g *globals) error {
			return runCreate(ctx, g, &createOptions{api: api, onTimeout: "kill", autoResume: true})
		}},
		{name: "fork of none", want: "want at least 1", run: func(ctx context.Context, g *globals) error {
			return runFork(ctx, g, &forkOptions{api: api, id: "sb"})
		}},
		{name: "negative fork timeout", want: "must not be negative", run: func(ctx context.Context, g *globals) error {
			return runFork(ctx, g, &forkOptions{api: api, id: "sb", count: 1, timeout: -1})
		}},
		{name: "negative resume timeout", want: "must not be negative", run: func(ctx context.Context, g *globals) error {
			return runResume(ctx, g, &resumeOptions{api: api, id: "sb", timeout: -1})
		}},
		{name: "pause with nobody there", want: "cannot reach tupper", run: func(ctx context.Context, g *globals) error {
			return runPause(ctx, g, &pauseOptions{api: api, ids: []string{"sb"}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &globals{stdout: &out, stderr: &out}
			err := tt.run(context.Background(), g)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
