package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/netpolicy"
)

type stubImages struct{ root string }

func (s stubImages) Resolve(ctx context.Context, name string) (*image.Image, error) {
	return &image.Image{ID: "sha256:stub", Names: []string{name}, RootFS: s.root}, nil
}

func newStubEngine(t *testing.T, root string, b backend.Backend) *Engine {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(agent, nil, 0o755)
	e, err := New(context.Background(), Config{Root: root, Backend: b, BackendName: "stub", Images: stubImages{t.TempDir()}, AgentPath: agent})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRecoverKeepsWhatItCannotSee checks that a restart whose backend
// cannot tell a sandbox's state (runsc failing for a moment) keeps the
// sandbox and its record, and that one the backend knows is gone is
// recorded killed.
func TestRecoverKeepsWhatItCannotSee(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := backendtest.NewFake()
	e := newStubEngine(t, root, b)
	kept, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()

	// Restart with a backend that cannot tell: nothing is killed.
	b.FailState(errors.New("runsc state: signal: killed"))
	e = newStubEngine(t, root, b)
	for _, id := range []string{kept.ID, gone.ID} {
		if _, err := e.Get(ctx, id); err != nil {
			t.Errorf("sandbox %s after a restart that could not tell: %v", id, err)
		}
	}
	if stopped := b.Stopped(); len(stopped) != 0 {
		t.Errorf("the engine stopped %v, which it could not see", stopped)
	}
	e.Close()

	// Restart once one sandbox is really gone: that one is recorded
	// killed, the other kept.
	b.FailState(nil)
	b.Stop(ctx, gone.ID)
	e = newStubEngine(t, root, b)
	defer e.Close()
	if _, err := e.Get(ctx, kept.ID); err != nil {
		t.Errorf("the living sandbox: %v", err)
	}
	if _, err := e.Get(ctx, gone.ID); !errdefs.IsNotFound(err) {
		t.Errorf("the dead sandbox: %v, want not found", err)
	}
	killed, _, err := e.List(ctx, ListOptions{States: []string{"killed"}})
	if err != nil || len(killed) != 1 || killed[0].ID != gone.ID {
		t.Errorf("killed records = %v, %v; want %s", killed, err, gone.ID)
	}
}

// TestUpdateNetworkKeepsPortAccess checks that an egress update, through
// any face, keeps who may reach the sandbox's ports, and that an update
// never brings back a killed sandbox's record.
func TestUpdateNetworkKeepsPortAccess(t *testing.T) {
	ctx := context.Background()
	b := backendtest.NewFake()
	e := newStubEngine(t, t.TempDir(), b)
	defer e.Close()
	private := false
	sb, err := e.Create(ctx, CreateOptions{Network: &netpolicy.Policy{AllowPublicTraffic: &private}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.UpdateNetwork(ctx, sb.ID, &netpolicy.Policy{DenyOut: []string{"203.0.113.0/24"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Network.AllowPublicTraffic == nil || *got.Network.AllowPublicTraffic {
		t.Errorf("the update opened the sandbox's ports: %+v", got.Network)
	}
	if err := e.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.UpdateNetwork(ctx, sb.ID, nil, nil); !errdefs.IsNotFound(err) {
		t.Errorf("an update of a killed sandbox: %v, want not found", err)
	}
	killed, _, _ := e.List(ctx, ListOptions{States: []string{"killed"}})
	if len(killed) != 1 {
		t.Errorf("killed records %v, want the one", killed)
	}
}

// leasingImages is stubImages that records leases, as image.Store keeps
// them on disk.
type leasingImages struct {
	stubImages
	mu     sync.Mutex
	leases map[string]string // holder → image id
}

func (l *leasingImages) Lease(ctx context.Context, holder, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[holder] = id
	return nil
}

func (l *leasingImages) Release(ctx context.Context, holder string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leases, holder)
	return nil
}

func (l *leasingImages) Holders(ctx context.Context, id string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for h, i := range l.leases {
		if id == "" || i == id {
			out = append(out, h)
		}
	}
	return out, nil
}

// TestImageLeases checks that a sandbox holds a lease on its image while
// it lives, that a kill releases it, and that a restart releases the
// leases of sandboxes the engine no longer runs, and only its own.
func TestImageLeases(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := backendtest.NewFake()
	imgs := &leasingImages{stubImages: stubImages{t.TempDir()}, leases: map[string]string{"someone-elses": "sha256:other"}}
	open := func() *Engine {
		agent := filepath.Join(t.TempDir(), "agent")
		os.WriteFile(agent, nil, 0o755)
		e, err := New(ctx, Config{Root: root, Backend: b, BackendName: "stub", Images: imgs, AgentPath: agent})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	a, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holders, _ := imgs.Holders(ctx, "sha256:stub")
	if len(holders) != 2 {
		t.Fatalf("leases %v, want one per sandbox", holders)
	}
	if err := e.Kill(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if holders, _ := imgs.Holders(ctx, "sha256:stub"); len(holders) != 1 {
		t.Errorf("after a kill: leases %v, want a's only", holders)
	}
	e.Close()
	// A lease left by a crash (a kill whose release never ran).
	imgs.Lease(ctx, leasePrefix(root)+"crashedsandbox", "sha256:stub")
	e = open()
	defer e.Close()
	holders, _ = imgs.Holders(ctx, "")
	slices.Sort(holders)
	want := []string{leasePrefix(root) + a.ID, "someone-elses"}
	slices.Sort(want)
	if !slices.Equal(holders, want) {
		t.Errorf("after a restart: leases %v, want %v", holders, want)
	}
}
