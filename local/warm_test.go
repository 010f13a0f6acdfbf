package local_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/netpolicy"
	"github.com/lightbearco/tupper/sdk"
)

// TestWarmPool checks a warm pool as its users rely on it: a create of the
// pool's template takes a booted sandbox (and says so), with the create's
// owners, metadata, environment, policy and a token of its own; a warm sandbox handed
// to a second user carries nothing of the first's; the pool refills after
// a burst, keeps within its memory budget, and its waiting sandboxes are
// nobody's to list.
func TestWarmPool(t *testing.T) {
	_, name := testutil.TestImage(t)
	s := newStack(t, engine.Config{
		WarmPools: []engine.PoolConfig{{Template: name, Size: 3}},
		// Room for two default sandboxes, not three.
		DefaultMemoryMB: 256, WarmMemoryMB: 600,
	})
	eng := s.rt.Engine()
	ctx := context.Background()
	full := func(n int) func() bool { return func() bool { return eng.WarmIdle(name) == n } }
	testutil.WaitFor(t, time.Minute, "the pool to fill to its budget", full(2))
	time.Sleep(time.Second)
	if n := eng.WarmIdle(name); n != 2 {
		t.Errorf("the pool holds %d sandboxes, want 2: its memory budget has room for two", n)
	}
	if list, _, err := eng.List(ctx, engine.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("waiting pool sandboxes are listed: %d, %v", len(list), err)
	}

	alice := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "alice"})
	bob := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "bob"})
	a, err := eng.Create(alice, engine.CreateOptions{Metadata: map[string]string{"who": "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Warm || a.Team != "t1" || a.Creator != "alice" || a.Metadata["who"] != "alice" {
		t.Fatalf("alice's sandbox: warm %v, team %q, creator %q, metadata %v", a.Warm, a.Team, a.Creator, a.Metadata)
	}
	asb, err := s.client.Connect(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	run(t, asb, "echo alice > /tmp/mine; echo alice > ~/mine")
	if _, err := asb.Commands.Start(ctx, "exec -a alice-marker sleep 3600", sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Kill(alice, a.ID); err != nil {
		t.Fatal(err)
	}

	// Bob's create, with a policy of its own, takes another warm sandbox:
	// none of alice's files or processes, and his own token and policy.
	deny := &netpolicy.Policy{DenyOut: []string{netpolicy.AllTrafficV4, netpolicy.AllTrafficV6}}
	b, err := eng.Create(bob, engine.CreateOptions{Network: deny, Env: map[string]string{"GREETING": "hello bob"}})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Warm || b.ID == a.ID || b.AccessToken == a.AccessToken || b.Network == nil || len(b.Network.DenyOut) != 2 {
		t.Fatalf("bob's sandbox: %+v", b)
	}
	bsb, err := s.client.Connect(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, bsb, "cat /tmp/mine ~/mine 2>&1; pgrep -f 'alice[-]marker' || echo none"); !strings.HasSuffix(res.Stdout, "none\n") || strings.Contains(res.Stdout, "alice\n") {
		t.Errorf("bob's warm sandbox shows alice's: %q", res.Stdout)
	}
	// His environment reaches his commands.
	if res := run(t, bsb, `echo "$GREETING"`); res.Stdout != "hello bob\n" {
		t.Errorf("bob's environment in his warm sandbox: %q", res.Stdout)
	}
	// His policy holds: the resolver refuses every name.
	if res, _ := bsb.Commands.Run(ctx, "getent hosts example.com || echo refused"); res == nil || !strings.Contains(res.Stdout, "refused") {
		t.Errorf("bob's deny-all policy does not hold in his warm sandbox: %+v", res)
	}
	if list, _, err := eng.List(bob, engine.ListOptions{}); err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("bob's listing: %+v, %v", list, err)
	}

	// A create the pool cannot serve (its own limits) boots cold.
	c, err := eng.Create(bob, engine.CreateOptions{MemoryMB: 300})
	if err != nil {
		t.Fatal(err)
	}
	if c.Warm {
		t.Error("a create with limits of its own came from the pool")
	}

	// A burst empties the pool; it refills to its budget.
	for range 3 {
		if _, err := eng.Create(bob, engine.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, time.Minute, "the pool to refill after a burst", full(2))

	// The engine's close takes its waiting sandboxes with it: they are
	// nobody's, and would hold memory while it is down.
	team := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "any"})
	mine, _, err := eng.List(team, engine.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range mine {
		if err := eng.Kill(team, sb.ID); err != nil {
			t.Error(err)
		}
	}
	waiting := eng.WarmSandboxes(name)
	s.rt.Close()
	s.rt = nil
	for _, id := range waiting {
		if pids := testutil.ProcessesOf(id); len(pids) > 0 {
			t.Errorf("warm sandbox %s still runs (pids %v) after the engine closed", id, pids)
		}
	}
}
