package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestTeams checks, against a real `tupper serve`, that an API key of
// another team neither sees nor touches a team's sandboxes through any
// face (the E2B API, the data plane, /mcp), that it gets the answers of a
// sandbox that does not exist, that clients can neither set nor read
// Tupper's reserved metadata, and that keys of one team share sandboxes;
// then the published e2b SDK does the same through e2b/teams.mjs.
func TestTeams(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	d := startServeDaemon(t)
	blue := d.addKey(t, "--team", "blue", "--name", "blue")
	mate := d.addKey(t, "--name", "mate")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	as := func(key string) *serveDaemon { k := *d; k.Key = key; return &k }

	// `tupper keys ls` tells the teams apart.
	ls := newTupperCLI(t, d, d.Key).ok(t, nil, "--root", d.Root, "key", "ls", "--json")
	var keys []struct{ Name, Team string }
	if err := json.Unmarshal([]byte(ls), &keys); err != nil {
		t.Fatalf("keys ls --json: %v\n%s", err, ls)
	}
	if !slices.ContainsFunc(keys, func(k struct{ Name, Team string }) bool { return k.Name == "blue" && k.Team == "blue" }) {
		t.Errorf("keys ls = %+v, want the blue key in team blue", keys)
	}

	create := func(key string, body any) map[string]any {
		t.Helper()
		status, data, err := as(key).api(ctx, http.MethodPost, "/sandboxes", body)
		if err != nil || status != http.StatusCreated {
			t.Fatalf("create: %d %s %v", status, data, err)
		}
		var sb map[string]any
		json.Unmarshal(data, &sb)
		return sb
	}
	a := create(d.Key, map[string]any{"metadata": map[string]string{"who": "a"}})
	aID, aToken := a["sandboxID"].(string), a["envdAccessToken"].(string)
	b := create(blue, map[string]any{"metadata": map[string]string{"who": "b"}})
	bID := b["sandboxID"].(string)

	if ids := as(blue).sandboxIDs(ctx, t); !slices.Equal(ids, []string{bID}) {
		t.Errorf("blue lists %v, want only its own %s", ids, bID)
	}
	if ids := as(mate).sandboxIDs(ctx, t); !slices.Contains(ids, aID) || slices.Contains(ids, bID) {
		t.Errorf("a's teammate lists %v, want %s and not blue's", ids, aID)
	}

	// REST: every route on a's sandbox answers blue as for an unknown id.
	const unknown = "nosuchsandbox0000000"
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/sandboxes/%s"},
		{http.MethodDelete, "/sandboxes/%s"},
		{http.MethodPost, "/sandboxes/%s/connect"},
		{http.MethodPost, "/sandboxes/%s/timeout"},
		{http.MethodGet, "/sandboxes/%s/metrics"},
		{http.MethodPut, "/sandboxes/%s/network"},
	} {
		body := map[string]any{"timeout": 60}
		wantStatus, wantBody, _ := as(blue).api(ctx, rt.method, fmt.Sprintf(rt.path, unknown), body)
		status, got, err := as(blue).api(ctx, rt.method, fmt.Sprintf(rt.path, aID), body)
		if err != nil || status != http.StatusNotFound || status != wantStatus ||
			strings.ReplaceAll(string(got), aID, "ID") != strings.ReplaceAll(string(wantBody), unknown, "ID") {
			t.Errorf("blue: %s %s: %d %s (%v); for an unknown id: %d %s", rt.method, rt.path, status, got, err, wantStatus, wantBody)
		}
	}

	// The data plane: a's token opens a's sandbox, but a blue key beside
	// it gets what an unknown sandbox gets.
	dataPlane := func(id, token, key string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/envs", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", token)
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := d.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(body)
	}
	if status, body := dataPlane(aID, aToken, ""); status != http.StatusOK {
		t.Errorf("a's token on a's data plane: %d %s", status, body)
	}
	wantStatus, wantBody := dataPlane(unknown, aToken, "")
	if status, body := dataPlane(aID, aToken, blue); status != wantStatus || strings.ReplaceAll(body, aID, "ID") != strings.ReplaceAll(wantBody, unknown, "ID") {
		t.Errorf("a blue key on a's data plane: %d %s; an unknown sandbox: %d %s", status, body, wantStatus, wantBody)
	}

	// Reserved metadata: refused on create and in filters, with a clear
	// message.
	status, data, _ := d.api(ctx, http.MethodPost, "/sandboxes", map[string]any{"metadata": map[string]string{"tupper.mcp.owner": "key_x"}})
	if status != http.StatusBadRequest || !strings.Contains(string(data), "reserved") {
		t.Errorf("create with tupper.mcp.owner: %d %s, want 400 saying reserved", status, data)
	}
	status, data, _ = d.api(ctx, http.MethodGet, "/v2/sandboxes?metadata=tupper.mcp.owner%3Dkey_x", nil)
	if status != http.StatusBadRequest {
		t.Errorf("list filtering on tupper.mcp.owner: %d %s, want 400", status, data)
	}

	// /mcp: blue's session sees none of the default team's sandboxes,
	// not even one a default key made over MCP, and cannot touch them.
	aMCP := mcpHTTPSession(t, d.URL+"/mcp", d.Key)
	res, err := aMCP.CallTool(ctx, &mcpsdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_sandbox over MCP: %v %v", err, res)
	}
	var made struct {
		Sandbox struct {
			ID       string            `json:"sandbox_id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"sandbox"`
	}
	b2, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b2, &made)
	mcpID := made.Sandbox.ID
	for k := range made.Sandbox.Metadata {
		if strings.HasPrefix(k, "tupper.") {
			t.Errorf("an MCP sandbox's metadata carry %q", k)
		}
	}
	bMCP := mcpHTTPSession(t, d.URL+"/mcp", blue)
	res, err = bMCP.CallTool(ctx, &mcpsdk.CallToolParams{Name: "list_sandboxes", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_sandboxes over MCP: %v %v", err, res)
	}
	listed, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(listed), aID) || strings.Contains(string(listed), mcpID) {
		t.Errorf("blue's MCP session lists another team's sandboxes: %s", listed)
	}
	for _, tool := range []string{"kill_sandbox", "list_files"} {
		res, err = bMCP.CallTool(ctx, &mcpsdk.CallToolParams{Name: tool, Arguments: map[string]any{"sandbox": mcpID}})
		if err != nil || !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "not found") {
			t.Errorf("blue's %s of an MCP sandbox of the default team: %v %v, want not found", tool, err, res)
		}
	}
	if status, _, _ := as(blue).api(ctx, http.MethodDelete, "/sandboxes/"+mcpID, nil); status != http.StatusNotFound {
		t.Errorf("blue's REST kill of the default team's MCP sandbox: %d", status)
	}
	// The MCP sandbox is the default team's: a teammate's REST key sees
	// it (and may end it).
	if status, data, _ := as(mate).api(ctx, http.MethodGet, "/sandboxes/"+mcpID, nil); status != http.StatusOK {
		t.Errorf("a teammate's GET of the MCP sandbox: %d %s", status, data)
	}

	// The published SDK, with blue's key.
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	sdkEnv := as(blue)
	runScript(t, node, dir, sdkEnv, "teams.mjs", "e2b@2.51.0", "OTHER_SANDBOX="+aID, "TEAMMATE_KEY="+mate)

	// Nothing blue did touched a's sandbox.
	if status, data, _ := d.api(ctx, http.MethodGet, "/sandboxes/"+aID, nil); status != http.StatusOK {
		t.Errorf("a's sandbox after blue's attempts: %d %s", status, data)
	}
}

// mcpHTTPSession opens an MCP session over Streamable HTTP with an API key.
func mcpHTTPSession(t *testing.T, url, key string) *mcpsdk.ClientSession {
	t.Helper()
	tr := &mcpsdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyTransport(key)}}
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("MCP session at %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// keyTransport sends an API key with every request.
type keyTransport string

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-KEY", string(k))
	return http.DefaultTransport.RoundTrip(r)
}
