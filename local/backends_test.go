package local_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

// TestSandboxesOnTwoBackends runs a gVisor sandbox (the default) beside
// one on another registered backend: the runtime opens the other under
// Root/backends/<name> with the host's network settings and without the
// default's options, each sandbox says which backend runs it, and after a
// restart the runtime re-attaches to both and kills each on its own
// backend.
func TestSandboxesOnTwoBackends(t *testing.T) {
	const other = "local-test-other"
	fake := backendtest.NewFake()
	backendtest.Register(t, other, fake)
	s := newStackNet(t, engine.Config{}, backend.NetworkConfig{NoIPv6: true, Exempt: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}})
	ctx := context.Background()

	onGvisor := s.create(t, sdk.CreateOptions{})
	onOther := s.create(t, sdk.CreateOptions{Backend: other})
	if b := onGvisor.Info().Backend; b != local.DefaultBackend {
		t.Errorf("the default's sandbox runs on %q, want %s", b, local.DefaultBackend)
	}
	if b := onOther.Info().Backend; b != other {
		t.Errorf("the other sandbox runs on %q, want %s", b, other)
	}
	if fake.Spec(onOther.ID()) == nil {
		t.Fatalf("%s holds no sandbox %s", other, onOther.ID())
	}
	want := []backend.Config{{Root: filepath.Join(s.cfg.Root, "backends", other), Network: s.cfg.Network}}
	// The secrets' resolver is a function: present, and not compared.
	opts := []cmp.Option{cmpopts.EquateComparable(netip.Prefix{}), cmpopts.IgnoreFields(backend.Config{}, "Logger"), cmpopts.IgnoreFields(backend.NetworkConfig{}, "Secrets")}
	opened := fake.Opened()
	if d := cmp.Diff(want, opened, opts...); d != "" {
		t.Errorf("%s opened with (-want +got):\n%s", other, d)
	}
	for _, c := range opened {
		if c.Network.Secrets == nil {
			t.Errorf("%s opened without the secrets' resolver: its egress proxy could not add a rule's secret", other)
		}
	}
	run(t, onGvisor, "true")

	s.rt.Close()
	s.open(t)
	for _, sb := range []*sdk.Sandbox{onGvisor, onOther} {
		info, err := s.client.GetInfo(ctx, sb.ID())
		if err != nil || info.Backend != sb.Info().Backend {
			t.Errorf("after a restart, sandbox %s: %+v, %v", sb.ID(), info, err)
		}
	}
	again, err := s.client.Connect(ctx, onGvisor.ID())
	if err != nil {
		t.Fatal(err)
	}
	run(t, again, "true")
	if err := s.client.Kill(ctx, onOther.ID()); err != nil {
		t.Fatal(err)
	}
	if stopped := fake.Stopped(); len(stopped) != 1 || stopped[0] != onOther.ID() {
		t.Errorf("%s stopped %v, want %s", other, stopped, onOther.ID())
	}
}
