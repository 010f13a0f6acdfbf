package cli

import (
	"context"
	"strings"
	"testing"
)

// TestMCPDaemon checks how `tupper mcp` picks between a daemon and the
// embedded engine.
func TestMCPDaemon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    mcpOptions
		env     map[string]string
		wantURL string // "" means the embedded engine
		wantErr string
	}{
		{name: "local wins", opts: mcpOptions{local: true, url: "http://127.0.0.1:1"}, env: map[string]string{"TUPPER_API_KEY": "e2b_x"}},
		{name: "flag", opts: mcpOptions{url: "http://127.0.0.1:1"}, env: map[string]string{"TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:1"},
		{name: "environment", env: map[string]string{"TUPPER_API_URL": "http://127.0.0.1:2", "TUPPER_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:2"},
		{name: "e2b environment", env: map[string]string{"E2B_API_URL": "http://127.0.0.1:3", "E2B_API_KEY": "e2b_x"}, wantURL: "http://127.0.0.1:3"},
		{name: "no key", opts: mcpOptions{url: "http://127.0.0.1:1"}, wantErr: "TUPPER_API_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"TUPPER_API_URL", "TUPPER_API_KEY", "TUPPER_SANDBOX_URL", "E2B_API_URL", "E2B_API_KEY", "E2B_SANDBOX_URL"} {
				t.Setenv(k, tc.env[k])
			}
			tr, err := tc.opts.daemon(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantURL == "" && tr != nil:
				t.Errorf("got the daemon at %s, want the embedded engine", tr.APIURL())
			case tc.wantURL != "" && (tr == nil || tr.APIURL() != tc.wantURL):
				t.Errorf("got %v, want the daemon at %s", tr, tc.wantURL)
			}
		})
	}
}
