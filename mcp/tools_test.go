package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// wantTools are the tools the server must offer, by name.
var wantTools = []string{
	"command_output", "create_sandbox", "delete_snapshot", "fork_sandbox", "kill_command", "kill_sandbox", "list_files", "list_sandboxes",
	"make_dir", "pause_sandbox", "read_file", "remove_path", "resume_sandbox", "run_code", "run_command", "send_stdin",
	"snapshot_sandbox", "write_file",
}

func newFakeServer(t *testing.T, cfg mcp.Config) (*fakeTransport, *mcpsdk.ClientSession) {
	t.Helper()
	ft := newFakeTransport()
	cfg.Client = &sdk.Client{Transport: ft}
	srv, err := mcp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ft, mcpSession(t, srv)
}

// TestToolsList checks the tool names and that every schema is portable:
// what the MCP inspector's --strict check and single-type clients need.
func TestToolsList(t *testing.T) {
	_, cs := newFakeServer(t, mcp.Config{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		for kind, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			// Check the schema as it goes on the wire.
			b, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("tool %s %s: %v", tool.Name, kind, err)
			}
			if m["type"] != "object" {
				t.Errorf("tool %s %s: type %v, want object", tool.Name, kind, m["type"])
			}
			checkPortable(t, tool.Name+" "+kind, m, "")
		}
	}
	slices.Sort(names)
	if diff := cmp.Diff(wantTools, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

// checkPortable walks a schema: every subschema has one type, every
// property a description, and no schema is a bare boolean except an
// additionalProperties.
func checkPortable(t *testing.T, where string, s map[string]any, path string) {
	t.Helper()
	switch ty := s["type"].(type) {
	case string:
	default:
		t.Errorf("%s %s: type is %v, want one type name", where, path, ty)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for name, p := range props {
			ps, ok := p.(map[string]any)
			if !ok {
				t.Errorf("%s %s.%s: schema is %v, want an object", where, path, name, p)
				continue
			}
			if d, _ := ps["description"].(string); d == "" {
				t.Errorf("%s %s.%s has no description", where, path, name)
			}
			checkPortable(t, where, ps, path+"."+name)
		}
	}
	if items, ok := s["items"]; ok {
		is, ok := items.(map[string]any)
		if !ok {
			t.Errorf("%s %s[]: items is %v, want an object", where, path, items)
		} else {
			checkPortable(t, where, is, path+"[]")
		}
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		checkPortable(t, where, ap, path+"{}")
	}
}

// TestErrors checks that bad calls come back as error results that say what
// to do, and that an unknown tool is a protocol error.
func TestErrors(t *testing.T) {
	_, cs := newFakeServer(t, mcp.Config{})
	for _, tc := range []struct {
		name  string
		tool  string
		args  map[string]any
		wants []string
	}{
		{"unknown sandbox", "run_command", map[string]any{"sandbox": "nope", "command": "true"}, []string{`sandbox "nope" not found`, "list_sandboxes"}},
		{"unknown sandbox kill", "kill_sandbox", map[string]any{"sandbox": "nope"}, []string{"not found", "create_sandbox"}},
		{"missing argument", "run_command", map[string]any{"command": "true"}, []string{"sandbox"}},
		{"wrong type", "run_command", map[string]any{"sandbox": "x", "command": 7}, []string{"command"}},
		{"unknown argument", "list_sandboxes", map[string]any{"colour": "red"}, []string{"colour"}},
		{"empty command", "run_command", map[string]any{"sandbox": "x", "command": " "}, []string{"command is empty"}},
		{"bad language", "run_code", map[string]any{"sandbox": "x", "language": "cobol", "code": "x"}, []string{"language"}},
		{"bad base64", "write_file", map[string]any{"sandbox": "x", "path": "/a", "content": "!!", "encoding": "base64"}, []string{"base64"}},
		{"bad pid", "command_output", map[string]any{"sandbox": "x", "pid": 0}, []string{"pid 0"}},
		{"reserved metadata", "create_sandbox", map[string]any{"metadata": map[string]any{"tupper.mcp.owner": "x"}}, []string{"reserved"}},
		{"reserved metadata of any kind", "create_sandbox", map[string]any{"metadata": map[string]any{"tupper.team": "x"}}, []string{"reserved"}},
		{"idle timeout label", "create_sandbox", map[string]any{"metadata": map[string]any{mcp.MetadataIdleTimeout: "1"}}, []string{"reserved"}},
		{"reserved metadata filter", "list_sandboxes", map[string]any{"metadata": map[string]any{"tupper.mcp.owner": "x"}}, []string{"reserved"}},
		{"template and image", "create_sandbox", map[string]any{"template": "a", "image": "b"}, []string{"not both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callErr(t, cs, tc.tool, tc.args, tc.wants...)
		})
	}
	t.Run("unknown tool", func(t *testing.T) {
		_, err := cs.CallTool(context.Background(), &mcpsdk.CallToolParams{Name: "format_disk"})
		if err == nil || !strings.Contains(err.Error(), "format_disk") {
			t.Errorf("call of an unknown tool: err %v, want a protocol error naming it", err)
		}
	})
}

// TestCreateTagsAndTimeout checks what a create asks of Tupper: the idle
// timeout tag and no owner in the metadata, the default timeout, the
// recorded network policy.
func TestCreateTagsAndTimeout(t *testing.T) {
	ft, cs := newFakeServer(t, mcp.Config{Tags: map[string]string{"session": "s1"}})
	var out struct {
		Sandbox struct {
			SandboxID string            `json:"sandbox_id"`
			Metadata  map[string]string `json:"metadata"`
		} `json:"sandbox"`
		Note string `json:"note"`
	}
	callOK(t, cs, "create_sandbox", map[string]any{
		"metadata": map[string]any{"project": "p"},
		"network":  map[string]any{"allow_out": []any{"pypi.org"}, "deny_out": []any{"0.0.0.0/0"}, "allow_internet_access": false},
	}, &out)
	info := ft.sandboxes[out.Sandbox.SandboxID]
	if info == nil {
		t.Fatalf("sandbox %q was not created", out.Sandbox.SandboxID)
	}
	want := map[string]string{
		"project": "p", "session": "s1", mcp.MetadataIdleTimeout: "600",
	}
	if diff := cmp.Diff(want, info.Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if left := info.EndAt.Sub(info.StartedAt); left != mcp.DefaultTimeout {
		t.Errorf("time to live %v, want %v", left, mcp.DefaultTimeout)
	}
	// The policy goes to the sandbox itself, not to its labels.
	if info.Network == nil || !slices.Equal(info.Network.AllowOut, []string{"pypi.org"}) || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) ||
		info.AllowInternetAccess == nil || *info.AllowInternetAccess {
		t.Errorf("create passed network %+v, allowInternetAccess %v", info.Network, info.AllowInternetAccess)
	}

	// A call on a sandbox close to its end pushes the end a full idle
	// timeout out. (The call itself fails: the fake has no data plane.)
	callOK(t, cs, "create_sandbox", map[string]any{"timeout_seconds": 100}, &out)
	id := out.Sandbox.SandboxID
	ft.mu.Lock()
	ft.sandboxes[id].EndAt = time.Now().Add(10 * time.Second)
	ft.mu.Unlock()
	call(t, cs, "list_files", map[string]any{"sandbox": id})
	ft.mu.Lock()
	left := time.Until(ft.sandboxes[id].EndAt)
	ft.mu.Unlock()
	if left < 90*time.Second || left > 100*time.Second {
		t.Errorf("after a call, the sandbox has %v left, want about 100s", left)
	}
}

// TestHTTPScoping checks the Streamable HTTP handler: API keys in either
// header, refusal without one, that every call runs in its key's scope (a
// key sees and touches only its own sandboxes and sessions), and that the
// handler refuses to run unscoped.
func TestHTTPScoping(t *testing.T) {
	ft := newFakeTransport()
	if _, err := mcp.Handler(mcp.Config{Client: &sdk.Client{Transport: ft}}, fakeKeys{}); err == nil {
		t.Error("Handler without a Scope: no error")
	}
	h, err := mcp.Handler(mcp.Config{Client: &sdk.Client{Transport: ft}, Scope: fakeScope}, fakeKeys{"e2b_a": "key-a", "e2b_b": "key-b"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	// A cleanup, not a defer: it must run after the sessions' cleanups
	// close their streams, or Close waits for them forever.
	t.Cleanup(ts.Close)

	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no key", nil, http.StatusUnauthorized},
		{"unknown key", map[string]string{"X-API-KEY": "e2b_zzz"}, http.StatusUnauthorized},
		{"unknown bearer", map[string]string{"Authorization": "Bearer e2b_zzz"}, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}

	a, err := httpSession(t, ts.URL, map[string]string{"X-API-KEY": "e2b_a"})
	if err != nil {
		t.Fatalf("session of key a: %v", err)
	}
	b, err := httpSession(t, ts.URL, map[string]string{"Authorization": "Bearer e2b_b"})
	if err != nil {
		t.Fatalf("session of key b: %v", err)
	}
	var created struct {
		Sandbox struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"sandbox"`
	}
	callOK(t, a, "create_sandbox", nil, &created)
	id := created.Sandbox.SandboxID
	if got := ft.owners[id]; got != "key-a" {
		t.Errorf("made under scope %q, want key-a", got)
	}
	for k := range ft.sandboxes[id].Metadata {
		if strings.HasPrefix(k, "tupper.") {
			t.Errorf("the sandbox's metadata carry %q: owners are not kept where clients read and write", k)
		}
	}
	// A sandbox made outside MCP belongs to nobody's key.
	if _, err := ft.CreateSandbox(context.Background(), sdk.CreateRequest{}); err != nil {
		t.Fatal(err)
	}

	type listed struct {
		Sandboxes []struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"sandboxes"`
	}
	var la, lb listed
	callOK(t, a, "list_sandboxes", nil, &la)
	callOK(t, b, "list_sandboxes", nil, &lb)
	if len(la.Sandboxes) != 1 || la.Sandboxes[0].SandboxID != id {
		t.Errorf("key a lists %+v, want only %s", la.Sandboxes, id)
	}
	if len(lb.Sandboxes) != 0 {
		t.Errorf("key b lists %+v, want nothing", lb.Sandboxes)
	}
	callErr(t, b, "kill_sandbox", map[string]any{"sandbox": id}, "not found")
	callErr(t, b, "run_command", map[string]any{"sandbox": id, "command": "true"}, "not found")
	if _, ok := ft.sandboxes[id]; !ok {
		t.Fatal("key b killed key a's sandbox")
	}

	// Key b may not ride key a's session.
	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", a.ID())
	req.Header.Set("X-API-KEY", "e2b_b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("key b on key a's session: status %d, want %d", resp.StatusCode, http.StatusForbidden)
	}

	callOK(t, a, "kill_sandbox", map[string]any{"sandbox": id}, nil)
	if _, ok := ft.sandboxes[id]; ok {
		t.Error("kill_sandbox left the sandbox")
	}
}
