package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestTeams checks that an API key sees and touches only its team's
// sandboxes, through every route of the control plane and the data
// plane, and that another team's sandbox answers word for word as an
// unknown one does; keys of one team share their sandboxes.
func TestTeams(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	blueKey, _, err := e.server.keys.CreateInTeam(ctx, "blue", "blue")
	if err != nil {
		t.Fatal(err)
	}
	mateKey, _, err := e.server.keys.Create(ctx, "teammate")
	if err != nil {
		t.Fatal(err)
	}
	a := e.create(`{"metadata":{"who":"a"}}`)
	status, _, data := e.doKey(blueKey, "POST", "/v2/sandboxes", `{"metadata":{"who":"b"}}`)
	if status != http.StatusCreated {
		t.Fatalf("create with the blue key: %d %s", status, data)
	}
	var b sandboxJSON
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}

	listed := func(key, path string) []string {
		t.Helper()
		status, _, data := e.doKey(key, "GET", path, "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, data)
		}
		var list []listedSandboxJSON
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range list {
			ids = append(ids, sb.SandboxID)
		}
		return ids
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?metadata=who%3Da", "/v2/sandboxes?state=running"} {
		if got := listed(blueKey, path); !slices.Equal(got, []string{b.SandboxID}) && !(strings.Contains(path, "who") && len(got) == 0) {
			t.Errorf("blue lists %v at %s, want only its own %s", got, path, b.SandboxID)
		}
		if got := listed(mateKey, path); !slices.Contains(got, a.SandboxID) || slices.Contains(got, b.SandboxID) {
			t.Errorf("a teammate of a lists %v at %s, want a's sandbox and not blue's", got, path)
		}
	}

	// Every route on another team's sandbox answers as on an unknown one.
	routes := []struct{ method, path, body string }{
		{"GET", "/sandboxes/%s", ""},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/%s/connect", `{}`},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":3600}`},
		{"POST", "/sandboxes/%s/pause", ""},
		{"POST", "/sandboxes/%s/resume", `{}`},
		{"GET", "/sandboxes/%s/metrics", ""},
		{"PUT", "/sandboxes/%s/network", `{"denyOut":["0.0.0.0/0"]}`},
		{"GET", "/sandboxes/%s/network/denials", ""},
	}
	const unknownID = "nosuchsandbox0000000"
	for _, rt := range routes {
		t.Run(rt.method+" "+strings.ReplaceAll(rt.path, "%s", "ID"), func(t *testing.T) {
			wantStatus, _, wantBody := e.doKey(blueKey, rt.method, fmt.Sprintf(rt.path, unknownID), rt.body)
			status, _, body := e.doKey(blueKey, rt.method, fmt.Sprintf(rt.path, a.SandboxID), rt.body)
			if status != http.StatusNotFound || status != wantStatus {
				t.Errorf("blue on a's sandbox: %d %s; an unknown sandbox: %d", status, body, wantStatus)
			}
			if got, want := strings.ReplaceAll(string(body), a.SandboxID, "ID"), strings.ReplaceAll(string(wantBody), unknownID, "ID"); got != want {
				t.Errorf("blue on a's sandbox says %s; on an unknown one %s", got, want)
			}
		})
	}
	status, _, data = e.doKey(mateKey, "GET", "/sandboxes/"+a.SandboxID, "")
	if status != http.StatusOK {
		t.Fatalf("a teammate's GET of a's sandbox: %d %s", status, data)
	}
	var detail sandboxDetailJSON
	json.Unmarshal(data, &detail)
	if detail.Network != nil || !detail.EndAt.Before(detail.StartedAt.Add(3600e9)) {
		t.Errorf("blue's calls changed a's sandbox: %+v", detail)
	}

	// The data plane: a's own token opens a's sandbox, but not next to a
	// blue key, which gets what an unknown sandbox gets.
	list := []byte(`{}`)
	if resp := e.data(a, "POST", "/process.Process/List", "application/json", list, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a's token alone: %d", resp.StatusCode)
	}
	if resp := e.data(a, "POST", "/process.Process/List", "application/json", list, http.Header{"X-Api-Key": {mateKey}}); resp.StatusCode != http.StatusOK {
		t.Errorf("a's token with a teammate's key: %d", resp.StatusCode)
	}
	gone := e.data(sandboxJSON{SandboxID: unknownID, EnvdAccessToken: "x"}, "POST", "/process.Process/List", "application/json", list, nil)
	wantBody := strings.ReplaceAll(readAll(t, gone), unknownID, "ID")
	for name, hdr := range map[string]http.Header{
		"X-API-KEY": {"X-Api-Key": {blueKey}},
		"bearer":    {"Authorization": {"Bearer " + blueKey}},
	} {
		resp := e.data(a, "POST", "/process.Process/List", "application/json", list, hdr)
		body := strings.ReplaceAll(readAll(t, resp), a.SandboxID, "ID")
		if resp.StatusCode != gone.StatusCode || body != wantBody {
			t.Errorf("a's token with a blue key in %s: %d %s; an unknown sandbox: %d %s", name, resp.StatusCode, body, gone.StatusCode, wantBody)
		}
	}
	// A signed URL of a's is a's capability, but not in blue hands.
	url := e.signedURL(a, "read", "/etc/hostname", "user", 0)
	for key, want := range map[string]int{"": http.StatusOK, blueKey: http.StatusBadGateway} {
		req, _ := http.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want && !(key == "" && resp.StatusCode != http.StatusBadGateway) {
			t.Errorf("signed URL with key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
	// A sandbox port through getHost: public, but not to a blue key.
	port := startApp(t)
	srvPort := e.http.Listener.Addr().(*net.TCPAddr).Port
	for key, want := range map[string]int{"": http.StatusOK, blueKey: http.StatusBadGateway} {
		req, _ := http.NewRequest("GET", e.http.URL+"/", nil)
		req.Host = fmt.Sprintf("%d-%s.tupper.test:%d", port, a.SandboxID, srvPort)
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("getHost port with key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}

	// Blue cannot kill a's sandbox; a teammate can.
	if status, _, _ := e.doKey(blueKey, "DELETE", "/sandboxes/"+a.SandboxID, ""); status != http.StatusNotFound {
		t.Errorf("blue's kill of a's sandbox: %d", status)
	}
	if status, _, body := e.doKey(mateKey, "DELETE", "/sandboxes/"+a.SandboxID, ""); status != http.StatusNoContent {
		t.Errorf("a teammate's kill of a's sandbox: %d %s", status, body)
	}
}

// TestReservedMetadataREST checks that clients can neither set nor filter
// on metadata keys under "tupper.", with a clear 400.
func TestReservedMetadataREST(t *testing.T) {
	e := newTestEnv(t)
	status, _, body := e.do("POST", "/v2/sandboxes", `{"metadata":{"tupper.mcp.owner":"key_0123"}}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), `tupper.mcp.owner`) || !strings.Contains(string(body), "reserved") {
		t.Errorf("create with a reserved metadata key: %d %s, want 400 naming the key as reserved", status, body)
	}
	status, _, body = e.do("GET", "/v2/sandboxes?metadata=tupper.mcp.owner%3Dkey_0123", "")
	if status != http.StatusBadRequest || !strings.Contains(string(body), "reserved") {
		t.Errorf("list filtering on a reserved key: %d %s, want 400", status, body)
	}
	sb := e.create(`{"metadata":{"tupperware":"lid"}}`)
	status, _, body = e.do("GET", "/sandboxes/"+sb.SandboxID, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"tupperware":"lid"`) {
		t.Errorf("a key that only looks reserved: %d %s", status, body)
	}
}
