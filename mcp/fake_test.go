package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/mcp"
	"github.com/lightbearco/tupper/sdk"
)

// fakeTransport is a control plane in memory, for tests of what the tools
// do without a sandbox: scoping, arguments, errors. Its data plane leads
// nowhere. Like the daemon's engine, it confines a call whose context
// carries a scope (see fakeScope) to the sandboxes made under that scope.
type fakeTransport struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*sdk.SandboxInfo
	owners    map[string]string // sandbox id → scope it was made under
}

func newFakeTransport() *fakeTransport {
	return &fakeTransport{sandboxes: map[string]*sdk.SandboxInfo{}, owners: map[string]string{}}
}

// fakeScopeKey carries a scope on a context, as engine.WithScope does.
type fakeScopeKey struct{}

// fakeScope is a Config.Scope that scopes every call to its API key's id,
// as the daemon does.
func fakeScope(ctx context.Context) (context.Context, error) {
	id, _, ok := mcp.CallerKey(ctx)
	if !ok {
		return nil, errors.New("no API key")
	}
	return context.WithValue(ctx, fakeScopeKey{}, id), nil
}

// sees reports whether a call on ctx may see sandbox id.
func (f *fakeTransport) sees(ctx context.Context, id string) bool {
	scope, ok := ctx.Value(fakeScopeKey{}).(string)
	return !ok || f.owners[id] == scope
}

func (f *fakeTransport) CreateSandbox(ctx context.Context, req sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	now := time.Now().UTC()
	info := &sdk.SandboxInfo{
		SandboxID: fmt.Sprintf("fake%d", f.next), TemplateID: "base", State: "running",
		Metadata: maps.Clone(req.Metadata), StartedAt: now, EndAt: now.Add(req.Timeout),
		Network: req.Network.Clone(), AllowInternetAccess: req.AllowInternetAccess,
	}
	f.sandboxes[info.SandboxID] = info
	f.owners[info.SandboxID], _ = ctx.Value(fakeScopeKey{}).(string)
	c := *info
	return &c, nil
}

func (f *fakeTransport) get(ctx context.Context, id string) (*sdk.SandboxInfo, error) {
	info, ok := f.sandboxes[id]
	if !ok || !f.sees(ctx, id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	c := *info
	return &c, nil
}

func (f *fakeTransport) ConnectSandbox(ctx context.Context, id string, _ time.Duration) (*sdk.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(ctx, id)
}

func (f *fakeTransport) GetSandbox(ctx context.Context, id string) (*sdk.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(ctx, id)
}

func (f *fakeTransport) ListSandboxes(ctx context.Context, q sdk.ListQuery) (*sdk.ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	page := &sdk.ListPage{}
	for id, info := range f.sandboxes {
		keep := f.sees(ctx, id)
		for k, v := range q.Metadata {
			if info.Metadata[k] != v {
				keep = false
			}
		}
		if keep {
			page.Sandboxes = append(page.Sandboxes, *info)
		}
	}
	sort.Slice(page.Sandboxes, func(i, j int) bool { return page.Sandboxes[i].SandboxID < page.Sandboxes[j].SandboxID })
	return page, nil
}

func (f *fakeTransport) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.sandboxes[id]
	if !ok || !f.sees(ctx, id) {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	info.EndAt = time.Now().Add(timeout)
	return nil
}

func (f *fakeTransport) KillSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[id]; !ok || !f.sees(ctx, id) {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeTransport) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(ctx, id); err != nil {
		return nil, err
	}
	return &sdk.DataPlane{BaseURL: "http://127.0.0.1:9"}, nil
}

// mcpSession connects a go-sdk client to srv in memory.
func mcpSession(t *testing.T, srv *mcpsdk.Server) *mcpsdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcpsdk.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; a protocol error fails the test.
func call(t *testing.T, cs *mcpsdk.ClientSession, name string, args map[string]any) *mcpsdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

// callOK calls a tool that must succeed and decodes its structured output
// into out.
func callOK(t *testing.T, cs *mcpsdk.ClientSession, name string, args map[string]any, out any) *mcpsdk.CallToolResult {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("call %s(%v): error result: %s", name, args, resultText(res))
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("call %s: decode %s: %v", name, b, err)
		}
	}
	return res
}

// callErr calls a tool that must fail with an error result whose text
// holds every one of wants.
func callErr(t *testing.T, cs *mcpsdk.ClientSession, name string, args map[string]any, wants ...string) {
	t.Helper()
	res := call(t, cs, name, args)
	text := resultText(res)
	if !res.IsError {
		t.Fatalf("call %s(%v) succeeded, want an error result: %s", name, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("call %s(%v): error %q does not say %q", name, args, text, w)
		}
	}
}

func resultText(res *mcpsdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// fakeKeys is a KeyVerifier of fixed keys, named by their ids.
type fakeKeys map[string]string // key → id

func (k fakeKeys) Verify(_ context.Context, key string) (*auth.Key, error) {
	id, ok := k[key]
	if !ok {
		return nil, fmt.Errorf("unknown key: %w", errdefs.ErrUnauthenticated)
	}
	return &auth.Key{ID: id, Name: id, Team: auth.DefaultTeam}, nil
}

// httpSession connects a go-sdk client over Streamable HTTP to url, with
// header set on every request.
func httpSession(t *testing.T, url string, header map[string]string) (*mcpsdk.ClientSession, error) {
	t.Helper()
	tr := &mcpsdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: headerRoundTripper(header)}}
	cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

// headerRoundTripper adds fixed headers to every request.
type headerRoundTripper map[string]string

func (h headerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}
