package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend/backendtest"
)

// TestCreateOnBackend checks Tupper's create extension "backend": a
// sandbox runs on the backend its create names (the daemon's default when
// it names none), its description and the listing say which, and a name
// the daemon does not have, or a backend that does not work on its host,
// is refused with what to do.
func TestCreateOnBackend(t *testing.T) {
	const other, broken = "server-test-other", "server-test-broken"
	fb := backendtest.NewFake()
	backendtest.Register(t, other, fb)
	backendtest.Register(t, broken, nil)
	e := newTestEnv(t)

	onDefault := e.create(`{"templateID":"base"}`)
	onOther := e.create(`{"templateID":"base","backend":"` + other + `"}`)
	if onDefault.Backend != "fake" || onOther.Backend != other {
		t.Errorf("creates answered backends %q and %q, want fake and %s", onDefault.Backend, onOther.Backend, other)
	}
	if fb.Spec(onOther.SandboxID) == nil || fb.Spec(onDefault.SandboxID) != nil {
		t.Errorf("the sandboxes did not start on the backends their creates named")
	}
	_, _, raw := e.do("GET", "/sandboxes/"+onOther.SandboxID, "")
	var d sandboxDetailJSON
	if err := json.Unmarshal(raw, &d); err != nil || d.Backend != other {
		t.Errorf("GET /sandboxes/{id} of the sandbox on %s: %s", other, raw)
	}
	_, _, raw = e.do("GET", "/v2/sandboxes", "")
	var list []listedSandboxJSON
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sb := range list {
		got[sb.SandboxID] = sb.Backend
	}
	if got[onDefault.SandboxID] != "fake" || got[onOther.SandboxID] != other {
		t.Errorf("the listing names backends %v", got)
	}

	tests := []struct {
		name   string
		body   string
		status int
		says   []string
	}{
		{name: "unknown", body: `{"backend":"no-such-backend"}`, status: http.StatusBadRequest, says: []string{"no-such-backend", "known backends", "fake", other}},
		{name: "does not work here", body: `{"backend":"` + broken + `"}`, status: http.StatusServiceUnavailable, says: []string{"does not work on this host", "fix: load the " + broken + " module", "tupper doctor"}},
		{name: "not a string", body: `{"backend":7}`, status: http.StatusBadRequest, says: []string{`"backend"`, "a string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := e.do("POST", "/v2/sandboxes", tt.body)
			var ae apiError
			if err := json.Unmarshal(body, &ae); err != nil || status != tt.status || ae.Code != tt.status {
				t.Fatalf("create %s: %d %s, want %d", tt.body, status, body, tt.status)
			}
			for _, s := range tt.says {
				if !strings.Contains(ae.Message, s) {
					t.Errorf("create %s: %q does not say %q", tt.body, ae.Message, s)
				}
			}
		})
	}

	status, _, body := e.do("DELETE", "/sandboxes/"+onOther.SandboxID, "")
	if status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", status, body)
	}
	if stopped := fb.Stopped(); len(stopped) != 1 || stopped[0] != onOther.SandboxID {
		t.Errorf("the kill stopped %v on %s, want the sandbox", stopped, other)
	}
}
