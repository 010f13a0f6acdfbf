package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// These tests check what the HTTP transport puts on the wire against a
// fake control plane; remote_test.go runs it against the real server.

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// recorded is one request the fake control plane saw.
type recorded struct {
	Method, Path string
	Query        url.Values
	Body         map[string]any
	Key          string
}

type fakeAPI struct {
	mu   sync.Mutex
	reqs []recorded
	// answer serves a request after it is recorded.
	answer func(w http.ResponseWriter, r *http.Request)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if b, _ := io.ReadAll(r.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Body: body, Key: r.Header.Get("X-Api-Key")})
	f.mu.Unlock()
	f.answer(w, r)
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func newFakeAPI(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*fakeAPI, *sdk.HTTPTransport) {
	t.Helper()
	f := &fakeAPI{answer: answer}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: srv.URL + "/", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return f, tr
}

func TestHTTPTransportWire(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		sandbox := map[string]any{"templateID": "base", "sandboxID": "sb1", "clientID": "c", "envdVersion": "0.5.7", "envdAccessToken": "tok1", "domain": "d"}
		switch r.Method + " " + r.URL.Path {
		case "POST /v2/sandboxes":
			writeJSON(w, http.StatusCreated, sandbox)
		case "POST /sandboxes/sb1/connect":
			writeJSON(w, http.StatusOK, sandbox)
		case "GET /v2/sandboxes":
			w.Header().Set("X-Next-Token", "next1")
			writeJSON(w, http.StatusOK, []map[string]any{{
				"templateID": "base", "alias": "base", "sandboxID": "sb1", "clientID": "c", "startedAt": started, "endAt": started.Add(time.Hour),
				"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 2048, "metadata": map[string]string{"k": "v"}, "state": "running", "envdVersion": "0.5.7",
				"backend": "runc",
			}})
		case "GET /sandboxes/sb2":
			writeJSON(w, http.StatusOK, map[string]any{"templateID": "base", "sandboxID": "sb2", "clientID": "c", "envdVersion": "0.5.7", "envdAccessToken": "tok2", "state": "running"})
		case "POST /sandboxes/sb1/timeout":
			w.WriteHeader(http.StatusNoContent)
		case "DELETE /sandboxes/sb1":
			w.WriteHeader(http.StatusNoContent)
		case "DELETE /sandboxes/gone":
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "sandbox gone not found"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "no such endpoint"})
		}
	})
	ctx := context.Background()

	info, err := tr.CreateSandbox(ctx, sdk.CreateRequest{
		Timeout: 1500 * time.Millisecond, Metadata: map[string]string{"k": "v"}, Env: map[string]string{"A": "1"}, CPUs: 2, MemoryMB: 512, DiskMB: 2048,
		Backend: "runc",
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.SandboxID != "sb1" || info.EnvdAccessToken != "tok1" || info.EnvdVersion != "0.5.7" {
		t.Errorf("create answered %+v", info)
	}
	dp, err := tr.DataPlane(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	wantDP := &sdk.DataPlane{
		BaseURL: tr.APIURL(), AccessToken: "tok1",
		Header: http.Header{"E2b-Sandbox-Id": {"sb1"}, "E2b-Sandbox-Port": {"49983"}},
	}
	if d := cmp.Diff(wantDP, dp, cmpopts.IgnoreFields(sdk.DataPlane{}, "Client")); d != "" {
		t.Errorf("data plane (-want +got):\n%s", d)
	}
	if dp.Client == nil {
		t.Error("data plane without a client")
	}
	if _, err := tr.ConnectSandbox(ctx, "sb1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ConnectSandbox(ctx, "sb1", time.Minute); err != nil {
		t.Fatal(err)
	}
	page, err := tr.ListSandboxes(ctx, sdk.ListQuery{
		Metadata: map[string]string{"odd key": "a&b=%41"}, States: []string{"running", "paused"}, Limit: 1, NextToken: "t0",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantPage := &sdk.ListPage{NextToken: "next1", Sandboxes: []sdk.SandboxInfo{{
		SandboxID: "sb1", TemplateID: "base", Alias: "base", Metadata: map[string]string{"k": "v"}, State: "running",
		StartedAt: started, EndAt: started.Add(time.Hour), CPUCount: 2, MemoryMB: 512, DiskSizeMB: 2048, EnvdVersion: "0.5.7",
		Backend: "runc",
	}}}
	if d := cmp.Diff(wantPage, page); d != "" {
		t.Errorf("page (-want +got):\n%s", d)
	}
	// A sandbox this transport has not met: DataPlane asks for its token.
	if dp, err := tr.DataPlane(ctx, "sb2"); err != nil || dp.AccessToken != "tok2" {
		t.Errorf("DataPlane(sb2) = %+v, %v; want token tok2", dp, err)
	}
	if err := tr.SetTimeout(ctx, "sb1", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetTimeout(ctx, "sb1", -time.Second); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("SetTimeout(-1s) = %v, want invalid argument", err)
	}
	if err := tr.KillSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	err = tr.KillSandbox(ctx, "gone")
	var apiErr *sdk.Error
	if !sdk.IsNotFound(err) || !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Message != "sandbox gone not found" {
		t.Errorf("KillSandbox(gone) = %#v, want a not-found *sdk.Error with the server's message", err)
	}

	want := []recorded{
		{Method: "POST", Path: "/v2/sandboxes", Body: map[string]any{
			"timeout": 2.0, "metadata": map[string]any{"k": "v"}, "envVars": map[string]any{"A": "1"}, "cpuCount": 2.0, "memoryMB": 512.0, "diskSizeMB": 2048.0,
			"backend": "runc",
		}},
		{Method: "POST", Path: "/sandboxes/sb1/connect", Body: map[string]any{}},
		{Method: "POST", Path: "/sandboxes/sb1/connect", Body: map[string]any{"timeout": 60.0}},
		{Method: "GET", Path: "/v2/sandboxes", Query: url.Values{
			// As the JS SDK sends it: the pairs encodeURIComponent-ed,
			// then the whole a query string.
			"metadata": {"odd%2520key=a%2526b%253D%252541"}, "state": {"running,paused"}, "limit": {"1"}, "nextToken": {"t0"},
		}},
		{Method: "GET", Path: "/sandboxes/sb2"},
		{Method: "POST", Path: "/sandboxes/sb1/timeout", Body: map[string]any{"timeout": 90.0}},
		{Method: "DELETE", Path: "/sandboxes/sb1"},
		{Method: "DELETE", Path: "/sandboxes/gone"},
	}
	got := f.requests()
	for i := range got {
		if got[i].Key != testKey {
			t.Errorf("%s %s: X-API-KEY %q", got[i].Method, got[i].Path, got[i].Key)
		}
		got[i].Key = ""
		if len(got[i].Query) == 0 {
			got[i].Query = nil
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
}

func TestHTTPTransportErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		status int
		header http.Header
		want   error
	}{
		{name: "unauthenticated", status: 401, want: errdefs.ErrUnauthenticated},
		{name: "invalid", status: 400, want: errdefs.ErrInvalidArgument},
		{name: "not found", status: 404, want: errdefs.ErrNotFound},
		{name: "not supported", status: 501, want: errdefs.ErrNotSupported},
		{name: "exhausted", status: 429, want: errdefs.ErrResourceExhausted},
		{name: "unavailable", status: 503, want: errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, tt.status, map[string]any{"code": tt.status, "message": "because " + tt.name})
			})
			_, err := tr.GetSandbox(ctx, "x")
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			var e *sdk.Error
			if !errors.As(err, &e) || e.Status != tt.status || e.Message != "because "+tt.name {
				t.Errorf("err = %#v, want an *sdk.Error with status %d and the server's message", err, tt.status)
			}
		})
	}

	t.Run("retry after", func(t *testing.T) {
		n := 0
		f, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			if n++; n == 1 {
				w.Header().Set("Retry-After", "0")
				writeJSON(w, 429, map[string]any{"code": 429, "message": "slow down"})
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		if err := tr.SetTimeout(ctx, "x", time.Second); err != nil {
			t.Fatal(err)
		}
		if got := f.requests(); len(got) != 2 || got[1].Body["timeout"] != 1.0 {
			t.Errorf("requests = %+v, want the same request twice", got)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = (&sdk.Client{Transport: tr}).List(ctx, sdk.ListOptions{})
		if !sdk.IsUnavailable(err) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("err = %v, want unavailable wrapping ECONNREFUSED", err)
		}
	})

	t.Run("not JSON", func(t *testing.T) {
		_, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>") })
		if _, err := tr.GetSandbox(ctx, "x"); !sdk.IsUnavailable(err) {
			t.Errorf("err = %v, want unavailable", err)
		}
	})
}

func TestHTTPConfig(t *testing.T) {
	envs := []string{sdk.EnvAPIURL, sdk.EnvAPIKey, sdk.EnvSandboxURL, sdk.EnvE2BAPIURL, sdk.EnvE2BAPIKey, sdk.EnvE2BSandboxURL}
	tests := []struct {
		name string
		env  map[string]string
		want sdk.HTTPConfig
	}{
		{name: "nothing"},
		{
			name: "tupper",
			env:  map[string]string{sdk.EnvAPIURL: "http://t", sdk.EnvAPIKey: "kt", sdk.EnvE2BAPIURL: "http://e", sdk.EnvE2BSandboxURL: "http://es", sdk.EnvE2BAPIKey: "ke"},
			want: sdk.HTTPConfig{APIURL: "http://t", APIKey: "kt"},
		},
		{
			name: "e2b",
			env:  map[string]string{sdk.EnvE2BAPIURL: "http://e", sdk.EnvE2BSandboxURL: "http://es", sdk.EnvE2BAPIKey: "ke"},
			want: sdk.HTTPConfig{APIURL: "http://e", SandboxURL: "http://es", APIKey: "ke"},
		},
		{
			name: "tupper URL, E2B key",
			env:  map[string]string{sdk.EnvAPIURL: "http://t", sdk.EnvSandboxURL: "http://ts", sdk.EnvE2BAPIKey: "ke"},
			want: sdk.HTTPConfig{APIURL: "http://t", SandboxURL: "http://ts", APIKey: "ke"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range envs {
				t.Setenv(k, tt.env[k])
			}
			if d := cmp.Diff(tt.want, sdk.HTTPConfigFromEnv()); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}

	// No URL means the local daemon's socket, which this root has not.
	t.Setenv("TUPPER_ROOT", t.TempDir())
	bad := []sdk.HTTPConfig{
		{},
		{APIURL: "unix://relative.sock"},
		{APIURL: "unix:///"},
		{APIURL: "127.0.0.1:3000"},
		{APIURL: "ftp://x"},
		{APIURL: "http://x", SandboxURL: "x"},
	}
	for _, cfg := range bad {
		if _, err := sdk.NewHTTPTransport(cfg); err == nil {
			t.Errorf("NewHTTPTransport(%+v) succeeded", cfg)
		}
	}
	if _, err := sdk.NewHTTPTransport(sdk.HTTPConfig{}); !errors.Is(err, sdk.ErrNoEndpoint) {
		t.Errorf("NewHTTPTransport without a URL = %v, want ErrNoEndpoint", err)
	}

	t.Run("zero client reads the environment", func(t *testing.T) {
		_, tr := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Api-Key") != testKey {
				writeJSON(w, 401, map[string]any{"code": 401, "message": "invalid API key"})
				return
			}
			writeJSON(w, http.StatusOK, []any{})
		})
		for _, k := range envs {
			t.Setenv(k, "")
		}
		t.Setenv(sdk.EnvE2BAPIURL, tr.APIURL())
		t.Setenv(sdk.EnvE2BAPIKey, testKey)
		var c sdk.Client
		if _, _, err := c.List(context.Background(), sdk.ListOptions{}); err != nil {
			t.Errorf("List with E2B_API_URL set: %v", err)
		}
	})
}

// TestStreamRequestsHaveALength checks that the data plane's client sends
// the one message of a server stream with a Content-Length, as the E2B
// SDKs do, and streams other requests as they come.
func TestStreamRequestsHaveALength(t *testing.T) {
	type seen struct {
		length  int64
		chunked bool
		body    string
	}
	var mu sync.Mutex
	got := map[string]seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			writeJSON(w, http.StatusOK, map[string]any{"sandboxID": "sb", "templateID": "base", "envdVersion": "0.5.7"})
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = seen{length: r.ContentLength, chunked: len(r.TransferEncoding) > 0, body: string(b)}
		mu.Unlock()
	}))
	defer srv.Close()
	for _, hc := range []*http.Client{nil, {Transport: http.DefaultTransport.(*http.Transport).Clone()}} {
		tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: srv.URL, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		dp, err := tr.DataPlane(context.Background(), "sb")
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/process.Process/Start", "/files"} {
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte("streamed message"))
				pw.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+path, pr)
			resp, err := dp.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		mu.Lock()
		if s := got["/process.Process/Start"]; s.length != 16 || s.chunked || s.body != "streamed message" {
			t.Errorf("Start was sent as %+v, want 16 bytes with a length", s)
		}
		if s := got["/files"]; !s.chunked || s.body != "streamed message" {
			t.Errorf("/files was sent as %+v, want it streamed", s)
		}
		mu.Unlock()
	}
}
