package engine

import (
	"context"
	"errors"
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
)

// gatedBackend is a Fake whose Starts wait for the test to open a gate,
// so that creates can be held in the middle of booting.
type gatedBackend struct {
	*backendtest.Fake
	started chan string
	gate    chan struct{}
}

func newGatedBackend() *gatedBackend {
	return &gatedBackend{Fake: backendtest.NewFake(), started: make(chan string, 100), gate: make(chan struct{})}
}

func (g *gatedBackend) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	g.started <- spec.ID
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Fake.Start(ctx, spec)
}

func newEngineOn(t *testing.T, b backend.Backend, edit func(*Config)) *Engine {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agent, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Root: t.TempDir(), Backend: b, BackendName: "fake", Images: stubImages{t.TempDir()}, AgentPath: agent}
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.KillAll(context.Background())
		e.Close()
	})
	return e
}

// TestAdmission holds MaxCreating creates in the middle of booting and
// sends a burst: MaxQueued wait for a turn, the rest are refused at once
// as busy with a time to retry; meanwhile get, list and kill answer; once
// the boots go on, every waiting create succeeds.
func TestAdmission(t *testing.T) {
	ctx := context.Background()
	g := newGatedBackend()
	e := newEngineOn(t, g, func(c *Config) { c.MaxCreating, c.MaxQueued, c.QueueWait = 2, 3, time.Hour })

	// One sandbox made before the burst, to look at and kill during it.
	close(g.gate)
	old, err := e.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-g.started
	g.gate = make(chan struct{})

	const burst = 12
	type result struct {
		sb  *Sandbox
		err error
	}
	results := make(chan result, burst)
	for range burst {
		go func() {
			sb, err := e.Create(ctx, CreateOptions{})
			results <- result{sb, err}
		}()
	}
	<-g.started
	<-g.started
	var busy, created int
	for range burst - 2 - 3 {
		r := <-results
		if r.err == nil {
			t.Fatal("a create beyond the turns and the queue succeeded while the boots were held")
		}
		after, ok := errdefs.RetryAfter(r.err)
		if !errors.Is(r.err, errdefs.ErrResourceExhausted) || !ok || after < time.Second {
			t.Fatalf("refused create: %v (retry after %v, %v), want busy with a retry time of a second or more", r.err, after, ok)
		}
		busy++
	}
	// The engine still answers everything else while creates are held.
	if _, err := e.Get(ctx, old.ID); err != nil {
		t.Errorf("Get during the burst: %v", err)
	}
	if list, _, err := e.List(ctx, ListOptions{}); err != nil || len(list) != 1 {
		t.Errorf("List during the burst: %d sandboxes, %v; want the one made before", len(list), err)
	}
	if err := e.Kill(ctx, old.ID); err != nil {
		t.Errorf("Kill during the burst: %v", err)
	}
	close(g.gate)
	for range 2 + 3 {
		r := <-results
		if r.err != nil {
			t.Errorf("a create that had a turn or waited for one: %v", r.err)
			continue
		}
		created++
	}
	if created != 5 || busy != burst-5 {
		t.Errorf("%d created and %d refused, want 5 and %d", created, busy, burst-5)
	}
	if e.admission.waiting != 0 || e.admission.creating != 0 || len(e.admission.turns) != 0 {
		t.Errorf("admission left %d waiting, %d creating, %d turns taken", e.admission.waiting, e.admission.creating, len(e.admission.turns))
	}
}

// TestAdmissionWaitEnds checks the two other ways out of the queue: the
// wait's bound, and a caller that goes away.
func TestAdmissionWaitEnds(t *testing.T) {
	ctx := context.Background()
	g := newGatedBackend()
	e := newEngineOn(t, g, func(c *Config) { c.MaxCreating, c.MaxQueued, c.QueueWait = 1, 1, 100*time.Millisecond })
	held := make(chan error, 1)
	go func() {
		_, err := e.Create(ctx, CreateOptions{})
		held <- err
	}()
	<-g.started
	_, err := e.Create(ctx, CreateOptions{})
	if _, ok := errdefs.RetryAfter(err); !ok || !strings.Contains(err.Error(), "no turn") {
		t.Errorf("a create that waited out QueueWait: %v, want busy", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := e.Create(cctx, CreateOptions{})
		waited <- err
	}()
	for e.admissionWaiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("a create whose caller went away while it waited: %v, want canceled", err)
	}
	close(g.gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if e.admissionWaiting() != 0 {
		t.Error("the queue kept a create that left it")
	}
}

func (e *Engine) admissionWaiting() int {
	e.admission.mu.Lock()
	defer e.admission.mu.Unlock()
	return e.admission.waiting
}

// TestMaxSandboxes checks the cap on live sandboxes.
func TestMaxSandboxes(t *testing.T) {
	ctx := context.Background()
	e := newEngineOn(t, backendtest.NewFake(), func(c *Config) { c.MaxSandboxes = 2 })
	var ids []string
	for range 2 {
		sb, err := e.Create(ctx, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	_, err := e.Create(ctx, CreateOptions{})
	if _, ok := errdefs.RetryAfter(err); !ok || !strings.Contains(err.Error(), "max-sandboxes") {
		t.Errorf("a create past the cap: %v, want busy naming --max-sandboxes", err)
	}
	if err := e.Kill(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Create(ctx, CreateOptions{}); err != nil {
		t.Errorf("a create once a sandbox ended: %v", err)
	}
}

// TestAbandonedCreateIsKilled checks that a sandbox whose creator went away
// while it booted is killed at once, not left to run out its time.
func TestAbandonedCreateIsKilled(t *testing.T) {
	g := newGatedBackend()
	e := newEngineOn(t, g, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Create(ctx, CreateOptions{})
		done <- err
	}()
	id := <-g.started
	cancel()
	close(g.gate)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Create whose caller went away: %v, want canceled", err)
	}
	if !slices.Contains(g.Stopped(), id) {
		t.Errorf("the backend never stopped the abandoned sandbox %s", id)
	}
	if r := killedReason(t, e, id); !strings.Contains(r, "went away") {
		t.Errorf("kill reason %q, want the creator gone", r)
	}
	if running := e.Running(); len(running) != 0 {
		t.Errorf("running after the abandoned create: %v", running)
	}
}

// TestFailedCreateIsCleanedAtOnce checks that a create that fails, and
// whose first cleanup fails too, is cleaned in the background without
// waiting for the next start: no backend sandbox, no record.
func TestFailedCreateIsCleanedAtOnce(t *testing.T) {
	b := backendtest.NewFake()
	// An agent that never says it is healthy: the boot times out with
	// the sandbox held by the backend.
	b.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	e := newEngineOn(t, b, func(c *Config) { c.BootTimeout, c.StopRetry = 200*time.Millisecond, 500*time.Millisecond })
	b.FailStops(2, nil)
	if _, err := e.Create(context.Background(), CreateOptions{}); err == nil {
		t.Fatal("a create whose agent never answered succeeded")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		held, _ := b.List(context.Background())
		recs, _, err := e.store.List(context.Background(), store.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 && len(recs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after a failed create: the backend holds %v and the store %d records", held, len(recs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAdmissionFairAcrossTeams floods the engine with one team's creates,
// held mid-boot so that they fill every turn and the queue, and checks
// that another team's create still gets a turn, that the flooding team
// gets no more than its share while the other waits, and that a per-team
// cap on live sandboxes holds.
func TestAdmissionFairAcrossTeams(t *testing.T) {
	g := newGatedBackend()
	e := newEngineOn(t, g, func(c *Config) {
		c.MaxCreating, c.MaxQueued, c.QueueWait, c.MaxSandboxesPerTeam = 2, 3, time.Hour, 4
	})
	flood := WithScope(context.Background(), Scope{Team: "flood", Key: "kf"})
	other := WithScope(context.Background(), Scope{Team: "other", Key: "ko"})
	type result struct {
		sb  *Sandbox
		err error
	}
	floods := make(chan result, 12)
	for range 12 {
		go func() {
			sb, err := e.Create(flood, CreateOptions{})
			floods <- result{sb, err}
		}()
	}
	<-g.started
	<-g.started
	// 2 booting, 3 waiting, 7 refused.
	for range 7 {
		if r := <-floods; !errors.Is(r.err, errdefs.ErrResourceExhausted) {
			t.Fatalf("a flooding create beyond the turns and queue: %v, want busy", r.err)
		}
	}
	mine := make(chan result, 1)
	go func() {
		sb, err := e.Create(other, CreateOptions{})
		mine <- result{sb, err}
	}()
	select {
	case r := <-mine:
		t.Fatalf("the other team's create was answered at once while the flood held every turn: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	// While the other team waits, the flooding team is over its share.
	if _, err := e.Create(flood, CreateOptions{}); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "share") {
		t.Errorf("a flooding create while another team waits: %v, want refused for its share", err)
	}
	close(g.gate)
	if r := <-mine; r.err != nil {
		t.Fatalf("the other team's create: %v", r.err)
	}
	created := 0
	for range 5 {
		if r := <-floods; r.err == nil {
			created++
		} else if !errors.Is(r.err, errdefs.ErrResourceExhausted) {
			t.Errorf("a waiting flood create: %v", r.err)
		}
	}
	// The per-team cap (4) holds: the fifth of the flood's sandboxes was
	// refused, whatever its turn.
	if created != 4 {
		t.Errorf("the flooding team got %d sandboxes, want its cap of 4", created)
	}
	if _, err := e.Create(flood, CreateOptions{}); err == nil || !strings.Contains(err.Error(), "max-sandboxes-per-team") {
		t.Errorf("a create past the team's cap: %v, want refused naming the cap", err)
	}
	if _, err := e.Create(other, CreateOptions{}); err != nil {
		t.Errorf("the other team, under its cap: %v", err)
	}
}
