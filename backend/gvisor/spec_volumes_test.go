package gvisor

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lightbearco/tupper/backend"
)

// TestBuildSpecBindsVolumesShared: volumes are bound read-write after the
// sandbox's own mounts, each host directory with one runsc mount hint
// that has runsc revalidate its cache of it (share "shared").
func TestBuildSpecBindsVolumesShared(t *testing.T) {
	cfg := Config{Root: "/r"}.withDefaults()
	spec := &backend.Spec{ID: "x", Mounts: []backend.Mount{
		{Source: "/vols/a/mnt/data", Destination: "/data"},
		{Source: "/vols/b/mnt/data", Destination: "/home/user/b"},
		{Source: "/vols/a/mnt/data", Destination: "/again"},
	}}
	got := buildSpec(specInput{Spec: spec, Limits: resolveLimits(&cfg, spec.Resources)})
	n := len(got.Mounts)
	rw := []string{"rbind", "rw", "nosuid", "nodev"}
	want := []specs.Mount{
		{Destination: "/data", Type: "bind", Source: "/vols/a/mnt/data", Options: rw},
		{Destination: "/home/user/b", Type: "bind", Source: "/vols/b/mnt/data", Options: rw},
		{Destination: "/again", Type: "bind", Source: "/vols/a/mnt/data", Options: rw},
	}
	if diff := cmp.Diff(want, got.Mounts[n-3:]); diff != "" {
		t.Errorf("the last mounts (-want +got):\n%s", diff)
	}
	wantHints := map[string]string{
		"dev.gvisor.spec.mount.tuppervolume0.source": "/vols/a/mnt/data",
		"dev.gvisor.spec.mount.tuppervolume0.type":   "bind",
		"dev.gvisor.spec.mount.tuppervolume0.share":  "shared",
		"dev.gvisor.spec.mount.tuppervolume1.source": "/vols/b/mnt/data",
		"dev.gvisor.spec.mount.tuppervolume1.type":   "bind",
		"dev.gvisor.spec.mount.tuppervolume1.share":  "shared",
	}
	if diff := cmp.Diff(wantHints, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}

	plain := buildSpec(specInput{Spec: &backend.Spec{ID: "y"}, Limits: resolveLimits(&cfg, backend.Resources{})})
	if len(plain.Annotations) != 0 || len(plain.Mounts) != n-3 {
		t.Errorf("a sandbox without volumes: %d mounts, annotations %v", len(plain.Mounts), plain.Annotations)
	}
}
