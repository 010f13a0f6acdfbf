package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/netpolicy"
)

// Names of the backends these tests register; the registry keeps them for
// the life of the test binary.
const (
	testBackendA      = "engine-test-a"
	testBackendBroken = "engine-test-broken"
)

// newMultiEngine opens an engine at root whose default backend is def
// ("stub") and which opens registered backends by name under
// root/backends.
func newMultiEngine(t *testing.T, root string, def *backendtest.Fake, onKilled func(string)) *Engine {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(agent, nil, 0o755)
	e, err := New(context.Background(), Config{
		Root: root, Backend: def, BackendName: "stub", Images: stubImages{t.TempDir()}, AgentPath: agent,
		BackendConfig: func(name string) backend.Config {
			return backend.Config{Root: filepath.Join(root, "backends", name)}
		},
		OnKilled: onKilled,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestBackendPerSandbox checks that a create runs on the backend it names
// (the default when it names none), that every operation on a sandbox
// goes to its own backend, that an unknown or broken backend is refused
// with what to do, and that the engine opens a backend once and closes
// it at Close.
func TestBackendPerSandbox(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	def, a := backendtest.NewFake(), backendtest.NewFake()
	backendtest.Register(t, testBackendA, a)
	backendtest.Register(t, testBackendBroken, nil)
	kills := newKillLog()
	e := newMultiEngine(t, root, def, kills.onKilled)

	onDef, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onA, err := e.Create(ctx, CreateOptions{Backend: testBackendA})
	if err != nil {
		t.Fatal(err)
	}
	crashing, err := e.Create(ctx, CreateOptions{Backend: testBackendA})
	if err != nil {
		t.Fatal(err)
	}
	if onDef.Backend != "stub" || onA.Backend != testBackendA {
		t.Errorf("records name backends %q and %q, want stub and %s", onDef.Backend, onA.Backend, testBackendA)
	}
	if def.Spec(onDef.ID) == nil || a.Spec(onDef.ID) != nil || a.Spec(onA.ID) == nil || def.Spec(onA.ID) != nil {
		t.Fatalf("sandboxes started on the wrong backends")
	}
	if got, _ := e.Get(ctx, onA.ID); got == nil || got.Backend != testBackendA {
		t.Errorf("Get(%s) = %+v, want backend %s", onA.ID, got, testBackendA)
	}
	opened := a.Opened()
	if len(opened) != 1 || opened[0].Root != filepath.Join(root, "backends", testBackendA) {
		t.Errorf("backend %s opened with %+v, want once under %s", testBackendA, opened, filepath.Join(root, "backends", testBackendA))
	}

	// The data plane reaches the sandbox through its own backend.
	if err := a.Serve(onA.ID, 8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "on a") })); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: e.DialContext}}
	resp, err := client.Get("http://" + SandboxAddr(onA.ID, 8080) + "/")
	if err != nil {
		t.Fatalf("GET port 8080 of the sandbox on %s: %v", testBackendA, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "on a" {
		t.Errorf("port 8080 answered %q", body)
	}

	// Network updates and denials go to its backend.
	if _, err := e.UpdateNetwork(ctx, onA.ID, &netpolicy.Policy{DenyOut: []string{"203.0.113.0/24"}}, nil); err != nil {
		t.Fatal(err)
	}
	if p := a.Network(onA.ID); p == nil || !slices.Equal(p.DenyOut, []string{"203.0.113.0/24"}) {
		t.Errorf("policy on %s after the update: %+v", testBackendA, p)
	}
	a.Deny(onA.ID, netpolicy.Denial{Host: "example.com"})
	if d, err := e.NetworkDenials(ctx, onA.ID); err != nil || len(d) != 1 {
		t.Errorf("denials = %v, %v; want the one its backend recorded", d, err)
	}

	// Its backend tells the engine when it dies on its own.
	a.Crash(crashing.ID)
	kills.waitKilled(t, crashing.ID)

	// A kill stops it on its backend, and only there.
	if err := e.Kill(ctx, onA.ID); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(a.Stopped(), onA.ID) || slices.Contains(def.Stopped(), onA.ID) {
		t.Errorf("kill of %s: %s stopped %v, the default %v", onA.ID, testBackendA, a.Stopped(), def.Stopped())
	}

	tests := []struct {
		name    string
		backend string
		class   error
		says    []string
	}{
		{name: "unknown", backend: "no-such-backend", class: errdefs.ErrInvalidArgument, says: []string{`"no-such-backend"`, "known backends", "stub", testBackendA}},
		{name: "does not work here", backend: testBackendBroken, class: errdefs.ErrUnavailable, says: []string{"missing", "load the " + testBackendBroken + " module", "tupper doctor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Create(ctx, CreateOptions{Backend: tt.backend})
			if !errors.Is(err, tt.class) {
				t.Fatalf("create on %s: %v, want %v", tt.backend, err, tt.class)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("create on %s: %q does not say %q", tt.backend, err, s)
				}
			}
		})
	}
	if live := e.Running(); len(live) != 1 || live[0] != onDef.ID {
		t.Errorf("running %v, want the default's sandbox only", live)
	}

	e.Close()
	if a.Closed() != 1 || def.Closed() != 0 {
		t.Errorf("Close closed %s %d times and the default %d times; want once and never (the default is the caller's)", testBackendA, a.Closed(), def.Closed())
	}
}

// TestRecoverAcrossBackends checks that a restart re-attaches to the
// sandboxes of every backend on record, sweeps each one's leftovers, and
// records killed, without failing, the sandboxes whose backend is not
// built in or no longer works.
func TestRecoverAcrossBackends(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	def, a := backendtest.NewFake(), backendtest.NewFake()
	backendtest.Register(t, testBackendA, a)
	e := newMultiEngine(t, root, def, nil)
	onDef, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onA, err := e.Create(ctx, CreateOptions{Backend: testBackendA})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	// What a crash mid-create leaves on a backend.
	if _, err := a.Start(ctx, &backend.Spec{ID: "leftover"}); err != nil {
		t.Fatal(err)
	}

	e = newMultiEngine(t, root, def, nil)
	for _, id := range []string{onDef.ID, onA.ID} {
		if _, err := e.Get(ctx, id); err != nil {
			t.Errorf("sandbox %s after a restart: %v", id, err)
		}
	}
	if got := a.Stopped(); !slices.Equal(got, []string{"leftover"}) {
		t.Errorf("%s stopped %v at the restart, want its leftover only", testBackendA, got)
	}
	if err := e.Kill(ctx, onA.ID); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(a.Stopped(), onA.ID) {
		t.Errorf("kill after the restart did not reach %s: it stopped %v", testBackendA, a.Stopped())
	}
	broken, err := e.Create(ctx, CreateOptions{Backend: testBackendA})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()

	// One record names a backend that stopped working, another one this
	// tupper does not have.
	backendtest.Register(t, testBackendA, nil)
	st, err := store.Open(filepath.Join(root, "tupper.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	unlinked := &Sandbox{ID: "unlinkedsandbox", Backend: "not-linked-here", State: store.StateRunning, StartedAt: now, EndAt: now.Add(time.Hour)}
	if err := st.Put(ctx, unlinked); err != nil {
		t.Fatal(err)
	}
	st.Close()

	e = newMultiEngine(t, root, def, nil)
	defer e.Close()
	if _, err := e.Get(ctx, onDef.ID); err != nil {
		t.Errorf("the default's sandbox after a restart beside a broken backend: %v", err)
	}
	for _, tt := range []struct{ id, says string }{
		{broken.ID, "missing"},
		{unlinked.ID, "not built into this tupper"},
	} {
		_, err := e.Get(ctx, tt.id)
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "its backend was not available") || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Get(%s) = %v, want not found saying its backend was not available (%s)", tt.id, err, tt.says)
		}
	}
}

// TestOneBackendOnly checks that an engine without BackendConfig refuses
// a create naming another backend than its own.
func TestOneBackendOnly(t *testing.T) {
	e := newStubEngine(t, t.TempDir(), backendtest.NewFake())
	defer e.Close()
	if _, err := e.Create(context.Background(), CreateOptions{Backend: "stub"}); err != nil {
		t.Errorf("create naming the engine's own backend: %v", err)
	}
	_, err := e.Create(context.Background(), CreateOptions{Backend: testBackendA})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `runs only "stub"`) {
		t.Errorf("create naming another backend: %v, want invalid argument", err)
	}
}
