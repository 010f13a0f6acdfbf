package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/auth"
	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
	pb "github.com/lightbearco/tupper/proto/process"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

// The tests in this package run the real engine and the real server over
// real HTTP. Only the backend is a stand-in: it "boots" a sandbox by
// serving a fake agent on a loopback port, so that the whole control and
// data plane is exercised without root or a runtime. env_gvisor_test.go
// repeats the essentials against real gVisor sandboxes.

// testEnv is one server over one engine.
type testEnv struct {
	t       *testing.T
	backend *fakeBackend
	engine  *engine.Engine
	server  *Server
	http    *httptest.Server
	key     string
}

func testLogger() *slog.Logger {
	if os.Getenv("TUPPER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	fb := &fakeBackend{sandboxes: map[string]*fakeSandbox{}}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(ctx, engine.Config{
		Root: filepath.Join(dir, "engine"), Backend: fb, BackendName: "fake",
		Images: fakeImages{rootfs: dir}, AgentPath: exe, Logger: testLogger(),
		// Creates may name the backends a test registers.
		BackendConfig: func(name string) backend.Config {
			return backend.Config{Root: filepath.Join(dir, "backends", name)}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Open(filepath.Join(dir, "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := keys.Create(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{
		Engine: eng, Keys: keys, Domain: "tupper.test", Logger: testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		eng.KillAll(context.Background())
		eng.Close()
		keys.Close()
		fb.stopAll()
	})
	return &testEnv{t: t, backend: fb, engine: eng, server: srv, http: hs, key: key}
}

// do sends a control-plane request with the env's API key and returns the
// status, the headers and the body.
func (e *testEnv) do(method, path, body string) (int, http.Header, []byte) {
	e.t.Helper()
	return e.doKey(e.key, method, path, body)
}

func (e *testEnv) doKey(key, method, path, body string) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// create makes a sandbox through the API and returns its create answer.
func (e *testEnv) create(body string) sandboxJSON {
	e.t.Helper()
	status, _, data := e.do("POST", "/v2/sandboxes", body)
	if status != http.StatusCreated {
		e.t.Fatalf("create %s: %d %s", body, status, data)
	}
	var sb sandboxJSON
	if err := json.Unmarshal(data, &sb); err != nil {
		e.t.Fatalf("create answer %s: %v", data, err)
	}
	return sb
}

// data sends a data-plane request routed by headers to sandbox sb.
func (e *testEnv) data(sb sandboxJSON, method, path, contentType string, body []byte, header http.Header) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	if sb.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	// header overrides those; a nil value removes the header.
	for k, vs := range header {
		if vs == nil {
			delete(req.Header, k)
		} else {
			req.Header[k] = vs
		}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// agent returns the fake agent of sandbox id.
func (e *testEnv) agent(id string) *fakeAgent {
	e.backend.mu.Lock()
	defer e.backend.mu.Unlock()
	fs, ok := e.backend.sandboxes[id]
	if !ok {
		e.t.Fatalf("no fake sandbox %s", id)
	}
	return fs.agent
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// envelope frames msg as one Connect streaming message.
func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// readEnvelope reads one Connect streaming message.
func readEnvelope(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}

// fakeImages resolves "base" and "other", and "interpreter-at-PORT" as an
// image whose sandboxes serve the code interpreter on PORT; anything else
// is not found.
type fakeImages struct{ rootfs string }

func (f fakeImages) Resolve(ctx context.Context, name string) (*image.Image, error) {
	if port, ok := strings.CutPrefix(name, "interpreter-at-"); ok {
		return &image.Image{ID: "sha256:" + name, Names: []string{name}, RootFS: f.rootfs,
			Config: image.ImageConfig{Labels: map[string]string{image.LabelCodeInterpreter: port}}}, nil
	}
	if name != "base" && name != "other" {
		return nil, fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	return &image.Image{ID: "sha256:" + name, Names: []string{name}, RootFS: f.rootfs}, nil
}

// fakeBackend starts each sandbox as a fake agent on a loopback port.
type fakeBackend struct {
	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	// reuseAddr makes every sandbox listen on the same address, as gVisor
	// sandboxes reuse the IPs of dead ones, and makes Stop leave open
	// connections to the old agent alive, as a vanished network
	// namespace leaves them half-open.
	reuseAddr string
	zombies   []*http.Server
}

type fakeSandbox struct {
	// network is the egress policy in force, as the backend got it.
	network *netpolicy.Policy
	srv     *http.Server
	ln      net.Listener
	agent   *fakeAgent
	crashed bool
}

var _ backend.Backend = (*fakeBackend)(nil)

func (b *fakeBackend) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	var token string
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "TUPPER_ACCESS_TOKEN="); ok {
			token = v
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sandboxes[spec.ID]; ok {
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	addr := "127.0.0.1:0"
	if b.reuseAddr != "" {
		addr = b.reuseAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	a := newFakeAgent(token)
	srv := &http.Server{Handler: a}
	go srv.Serve(ln)
	b.sandboxes[spec.ID] = &fakeSandbox{srv: srv, ln: ln, agent: a, network: spec.Network.Clone()}
	return &backend.Sandbox{ID: spec.ID, AgentAddr: ln.Addr().String(), Pid: os.Getpid(), StartedAt: time.Now()}, nil
}

// DialSandbox implements backend.Dialer: the agent's port is the fake
// agent's listener, and the sandbox's other ports are the host's own
// loopback ports, as if the sandbox's address were 127.0.0.1.
func (b *fakeBackend) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	b.mu.Lock()
	fs, ok := b.sandboxes[id]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if port == backend.AgentPort {
		addr = fs.ln.Addr().String()
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// UpdateNetwork implements backend.NetworkUpdater.
func (b *fakeBackend) UpdateNetwork(ctx context.Context, id string, p *netpolicy.Policy) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	fs, ok := b.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	fs.network = p.Clone()
	return nil
}

// NetworkDenials implements backend.NetworkObserver: one made-up denial.
func (b *fakeBackend) NetworkDenials(ctx context.Context, id string) ([]netpolicy.Denial, error) {
	return []netpolicy.Denial{{Kind: "dns", Destination: "blocked.test", Rule: "fake"}}, nil
}

// network returns the policy in force in sandbox id.
func (b *fakeBackend) network(id string) *netpolicy.Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sandboxes[id].network.Clone()
}

func (b *fakeBackend) State(ctx context.Context, id string) (backend.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fs, ok := b.sandboxes[id]
	switch {
	case !ok:
		return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	case fs.crashed:
		return backend.StateStopped, nil
	}
	return backend.StateRunning, nil
}

func (b *fakeBackend) Stop(ctx context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	fs, ok := b.sandboxes[id]
	delete(b.sandboxes, id)
	switch {
	case !ok:
	case b.reuseAddr != "":
		fs.ln.Close()
		b.zombies = append(b.zombies, fs.srv)
	default:
		fs.srv.Close()
	}
	return nil
}

func (b *fakeBackend) List(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.sandboxes {
		ids = append(ids, id)
	}
	return ids, nil
}

// crash stops a sandbox's agent behind the engine's back.
func (b *fakeBackend) crash(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if fs, ok := b.sandboxes[id]; ok {
		fs.srv.Close()
		fs.crashed = true
	}
}

func (b *fakeBackend) stopAll() {
	ids, _ := b.List(context.Background())
	for _, id := range ids {
		b.Stop(context.Background(), id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, srv := range b.zombies {
		srv.Close()
	}
}

// fakeAgent serves the parts of the envd protocol the server tests touch,
// checking the access token the way the real agent does.
type fakeAgent struct {
	token string
	mux   *http.ServeMux

	mu      sync.Mutex
	files   map[string][]byte
	paths   []string      // every path requested, in order
	headers []http.Header // the headers of every request
	// release lets a "slow" command's output go.
	release chan struct{}
}

func newFakeAgent(token string) *fakeAgent {
	a := &fakeAgent{token: token, mux: http.NewServeMux(), files: map[string][]byte{}, release: make(chan struct{})}
	path, h := processconnect.NewProcessHandler(&fakeProcess{agent: a})
	a.mux.Handle(path, h)
	a.mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	a.mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(agentMetrics{
			Timestamp: 1700000000, CPUCount: 2, CPUUsedPct: 12.5, MemTotal: 1 << 30, MemUsed: 1 << 28,
			DiskUsed: 5 << 20, DiskTotal: 10 << 20,
		})
	})
	a.mux.HandleFunc("/files", a.serveFiles)
	// The orchestrator's endpoints answer as if they worked: the tests
	// check that no client ever reaches them.
	for _, p := range []string{"/init", "/freeze", "/unfreeze", "/snapshot/prepare"} {
		a.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "orchestrator endpoint reached") })
	}
	return a
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.paths = append(a.paths, r.URL.Path)
	a.headers = append(a.headers, r.Header.Clone())
	a.mu.Unlock()
	switch {
	case r.URL.Path == "/health", r.URL.Path == "/files":
	case r.Header.Get("X-Access-Token") != a.token:
		http.Error(w, "agent: missing or wrong X-Access-Token", http.StatusUnauthorized)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func (a *fakeAgent) file(path string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	data, ok := a.files[path]
	return data, ok
}

func (a *fakeAgent) seen() ([]string, []http.Header) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.paths...), append([]http.Header(nil), a.headers...)
}

func (a *fakeAgent) serveFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	if r.Header.Get("X-Access-Token") != a.token {
		var exp int64
		fmt.Sscan(q.Get("signature_expiration"), &exp)
		if q.Get("signature") != fileSignature(q.Get("path"), op, q.Get("username"), a.token, exp) {
			http.Error(w, "agent: bad signature", http.StatusUnauthorized)
			return
		}
	}
	path := q.Get("path")
	switch r.Method {
	case http.MethodGet:
		a.mu.Lock()
		data, ok := a.files[path]
		a.mu.Unlock()
		if !ok {
			http.Error(w, "agent: no such file", http.StatusNotFound)
			return
		}
		w.Write(data)
	case http.MethodPost:
		data, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.files[path] = data
		a.mu.Unlock()
		json.NewEncoder(w).Encode([]map[string]string{{"name": filepath.Base(path), "type": "file", "path": path}})
	}
}

// fakeProcess answers Start with canned events: "echo hi" prints hi, and
// "slow" sends its start event and then waits for the agent's release.
type fakeProcess struct {
	processconnect.UnimplementedProcessHandler
	agent *fakeAgent
}

func (p *fakeProcess) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	return connect.NewResponse(&pb.ListResponse{Processes: []*pb.ProcessInfo{{Pid: 42, Config: &pb.ProcessConfig{Cmd: "sleep"}}}}), nil
}

func (p *fakeProcess) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 42}}}); err != nil {
		return err
	}
	cmd := strings.Join(append([]string{cfg.GetCmd()}, cfg.GetArgs()...), " ")
	out := ""
	switch {
	case strings.HasSuffix(cmd, "echo hi"):
		out = "hi\n"
	case strings.HasSuffix(cmd, "slow"):
		select {
		case <-p.agent.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		out = "done\n"
	default:
		return connect.NewError(connect.CodeNotFound, errors.New("fake agent knows no command "+cmd))
	}
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
		Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(out)}}}}); err != nil {
		return err
	}
	return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}}})
}

// signedURL builds a signed /files URL on the server, as the SDKs do.
func (e *testEnv) signedURL(sb sandboxJSON, op, path, user string, exp int64) string {
	q := url.Values{}
	q.Set("path", path)
	if user != "" {
		q.Set("username", user)
	}
	q.Set("signature", fileSignature(path, op, user, sb.EnvdAccessToken, exp))
	if exp != 0 {
		q.Set("signature_expiration", fmt.Sprint(exp))
	}
	return e.http.URL + "/files?" + q.Encode()
}
