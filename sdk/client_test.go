package sdk_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// fakeTransport is a control plane in memory, for the Client's own logic.
type fakeTransport struct {
	mu        sync.Mutex
	dataPlane func(id string) (*sdk.DataPlane, error)
	killed    []string
	pages     map[string]*sdk.ListPage // by NextToken
	queries   []sdk.ListQuery
	created   []sdk.CreateRequest
}

func (f *fakeTransport) CreateSandbox(ctx context.Context, req sdk.CreateRequest) (*sdk.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	return &sdk.SandboxInfo{SandboxID: fmt.Sprintf("sb%d", len(f.created)), TemplateID: req.Template, State: "running"}, nil
}

func (f *fakeTransport) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*sdk.SandboxInfo, error) {
	if id == "missing" {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return &sdk.SandboxInfo{SandboxID: id, State: "running"}, nil
}

func (f *fakeTransport) ListSandboxes(ctx context.Context, q sdk.ListQuery) (*sdk.ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	p, ok := f.pages[q.NextToken]
	if !ok {
		return nil, fmt.Errorf("token %q: %w", q.NextToken, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

func (f *fakeTransport) GetSandbox(ctx context.Context, id string) (*sdk.SandboxInfo, error) {
	return &sdk.SandboxInfo{SandboxID: id, State: "running"}, nil
}

func (f *fakeTransport) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	return nil
}

func (f *fakeTransport) KillSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, id)
	if id == "missing" {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

func (f *fakeTransport) DataPlane(ctx context.Context, id string) (*sdk.DataPlane, error) {
	if f.dataPlane != nil {
		return f.dataPlane(id)
	}
	return &sdk.DataPlane{BaseURL: "http://127.0.0.1:1"}, nil
}

func TestZeroClient(t *testing.T) {
	// With no endpoint in the environment, a zero Client has nothing to reach.
	for _, k := range []string{sdk.EnvAPIURL, sdk.EnvAPIKey, sdk.EnvSandboxURL, sdk.EnvE2BAPIURL, sdk.EnvE2BAPIKey, sdk.EnvE2BSandboxURL} {
		t.Setenv(k, "")
	}
	// Nor a local daemon's socket: this root has none.
	t.Setenv("TUPPER_ROOT", t.TempDir())
	ctx := context.Background()
	var c sdk.Client
	calls := map[string]func() error{
		"Create":  func() error { _, err := c.Create(ctx, sdk.CreateOptions{}); return err },
		"Connect": func() error { _, err := c.Connect(ctx, "x"); return err },
		"List":    func() error { _, _, err := c.List(ctx, sdk.ListOptions{}); return err },
		"Kill":    func() error { return c.Kill(ctx, "x") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, sdk.ErrNoEndpoint) || !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrNoEndpoint of class unavailable", err)
			}
			if !strings.Contains(err.Error(), "TUPPER_API_URL") || !strings.Contains(err.Error(), "local.Open") {
				t.Errorf("err = %q, want it to say how to configure an endpoint", err)
			}
		})
	}
	// The package-level functions use DefaultClient, which has no
	// transport unless a program or the environment sets one.
	if _, err := sdk.Create(ctx, sdk.CreateOptions{}); !errors.Is(err, sdk.ErrNoEndpoint) {
		t.Errorf("sdk.Create: err = %v, want ErrNoEndpoint", err)
	}
}

func TestCreateConnectKill(t *testing.T) {
	ctx := context.Background()
	ft := &fakeTransport{}
	c := &sdk.Client{Transport: ft}
	sb, err := c.Create(ctx, sdk.CreateOptions{Template: "base", Timeout: time.Minute, Metadata: map[string]string{"k": "v"}, Envs: map[string]string{"A": "1"}, Backend: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID() != "sb1" || sb.Info().TemplateID != "base" {
		t.Errorf("sandbox = %q %+v", sb.ID(), sb.Info())
	}
	want := sdk.CreateRequest{Template: "base", Timeout: time.Minute, Metadata: map[string]string{"k": "v"}, Env: map[string]string{"A": "1"}, Backend: "runc"}
	if diff := cmp.Diff(want, ft.created[0]); diff != "" {
		t.Errorf("create request (-want +got):\n%s", diff)
	}
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Connect(ctx, "missing"); !sdk.IsNotFound(err) {
		t.Errorf("Connect(missing): err = %v, want not found", err)
	}
	if err := c.Kill(ctx, "missing"); !sdk.IsNotFound(err) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Kill(missing): err = %v, want not found naming the id", err)
	}

	// A sandbox whose data plane cannot be had is killed, not leaked.
	ft.dataPlane = func(id string) (*sdk.DataPlane, error) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrUnavailable)
	}
	if _, err := c.Create(ctx, sdk.CreateOptions{}); !sdk.IsUnavailable(err) {
		t.Fatalf("Create with a broken data plane: err = %v", err)
	}
	if diff := cmp.Diff([]string{"sb1", "missing", "sb2"}, ft.killed); diff != "" {
		t.Errorf("killed (-want +got):\n%s", diff)
	}
}

func TestPaginator(t *testing.T) {
	ctx := context.Background()
	ft := &fakeTransport{pages: map[string]*sdk.ListPage{
		"":   {Sandboxes: []sdk.SandboxInfo{{SandboxID: "a"}, {SandboxID: "b"}}, NextToken: "t1"},
		"t1": {Sandboxes: []sdk.SandboxInfo{{SandboxID: "c"}}, NextToken: "t2"},
		"t2": {Sandboxes: nil},
	}}
	c := &sdk.Client{Transport: ft}
	p := c.NewPaginator(sdk.ListOptions{Limit: 2, States: []string{"running"}})
	var ids []string
	for p.HasNext() {
		page, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			ids = append(ids, s.SandboxID)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if len(ft.queries) != 3 || ft.queries[1].NextToken != "t1" || ft.queries[2].Limit != 2 || ft.queries[2].States[0] != "running" {
		t.Errorf("queries = %+v", ft.queries)
	}
	if page, err := p.Next(ctx); page != nil || err != nil {
		t.Errorf("Next after the end = %v, %v", page, err)
	}
	items, next, err := c.List(ctx, sdk.ListOptions{})
	if err != nil || len(items) != 2 || next != "t1" {
		t.Errorf("List = %v, %q, %v", items, next, err)
	}
}

// TestDataPlaneHeaders checks that every data-plane request carries the
// DataPlane's headers, the access token, and the acting user.
func TestDataPlaneHeaders(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		switch r.URL.Path {
		case "/process.Process/List":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"processes":[{"pid":7,"tag":"t","config":{"cmd":"/bin/bash","args":["-l"],"envs":{"A":"1"},"cwd":"/tmp"}}]}`)
		case "/files":
			if r.URL.Query().Get("path") == "/nope" {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, `{"code":404,"message":"file not found"}`)
				return
			}
			fmt.Fprint(w, "content")
		case "/health":
			w.WriteHeader(http.StatusNoContent)
		case "/filesystem.Filesystem/Stat":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"entry":{"name":"x","type":"FILE_TYPE_FILE","path":"/etc/x","size":"7","mode":420,"permissions":"-rw-r--r--","owner":"root","group":"root","modifiedTime":"2024-05-01T10:00:00Z"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ft := &fakeTransport{dataPlane: func(id string) (*sdk.DataPlane, error) {
		return &sdk.DataPlane{
			BaseURL:     srv.URL + "/",
			Header:      http.Header{"E2b-Sandbox-Id": {id}},
			AccessToken: "tok",
		}, nil
	}}
	ctx := context.Background()
	sb, err := (&sdk.Client{Transport: ft}).Connect(ctx, "sbx")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := sb.Commands.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantProcs := []sdk.ProcessInfo{{PID: 7, Tag: "t", Cmd: "/bin/bash", Args: []string{"-l"}, Envs: map[string]string{"A": "1"}, Cwd: "/tmp"}}
	if diff := cmp.Diff(wantProcs, procs); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}
	b, err := sb.Files.Read(ctx, "/etc/x", sdk.WithUser("root"))
	if err != nil || string(b) != "content" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	if _, err := sb.Files.Read(ctx, "/nope"); !sdk.IsNotFound(err) || !strings.Contains(err.Error(), "file not found") {
		t.Errorf("Read(/nope): err = %v, want not found with the server's text", err)
	}
	entry, err := sb.Files.Stat(ctx, "/etc/x", sdk.WithUser("root"))
	if err != nil {
		t.Fatal(err)
	}
	wantEntry := &sdk.EntryInfo{Name: "x", Type: sdk.FileTypeFile, Path: "/etc/x", Size: 7, Mode: 0o644, Permissions: "-rw-r--r--",
		Owner: "root", Group: "root", ModifiedTime: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)}
	if diff := cmp.Diff(wantEntry, entry); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	running, err := sb.IsRunning(ctx)
	if err != nil || !running {
		t.Errorf("IsRunning = %v, %v", running, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for path, h := range seen {
		if h.Get("E2b-Sandbox-Id") != "sbx" || h.Get("X-Access-Token") != "tok" {
			t.Errorf("%s: headers %v lack the data plane's headers", path, h)
		}
	}
	if h := seen["/process.Process/List"]; h.Get("Content-Type") != "application/json" {
		t.Errorf("RPCs are not sent as Connect JSON: Content-Type %q", h.Get("Content-Type"))
	}
	basicRoot := "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))
	if got := seen["/filesystem.Filesystem/Stat"].Get("Authorization"); got != basicRoot {
		t.Errorf("Stat as root: Authorization %q, want %q", got, basicRoot)
	}
	if got := seen["/process.Process/List"].Get("Authorization"); got != "" {
		t.Errorf("List without a user: Authorization %q, want none", got)
	}
}

func TestIsRunning(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		want    bool
		wantErr bool
	}{
		{name: "204", status: http.StatusNoContent, want: true},
		{name: "502", status: http.StatusBadGateway, want: false},
		{name: "500", status: http.StatusInternalServerError, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			sb := connectTo(t, srv.URL)
			got, err := sb.IsRunning(context.Background())
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("IsRunning = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		got, err := connectTo(t, url).IsRunning(context.Background())
		if got || err != nil {
			t.Errorf("IsRunning = %v, %v; want false, nil", got, err)
		}
	})
}

func connectTo(t *testing.T, url string) *sdk.Sandbox {
	t.Helper()
	ft := &fakeTransport{dataPlane: func(string) (*sdk.DataPlane, error) { return &sdk.DataPlane{BaseURL: url}, nil }}
	sb, err := (&sdk.Client{Transport: ft}).Connect(context.Background(), "sbx")
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
