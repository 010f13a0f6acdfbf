package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

func TestVolumesByTeamAndName(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	red := &Volume{ID: "v1", Team: "red", Name: "data", Token: "tok1", SizeBytes: 1 << 30, CreatedAt: at, State: VolumeReady}
	if err := s.InsertVolume(ctx, red); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertVolume(ctx, &Volume{ID: "v2", Team: "red", Name: "data", CreatedAt: at, State: VolumeReady}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("a second volume named data in red: %v, want already exists", err)
	}
	blue := &Volume{ID: "v3", Team: "blue", Name: "data", CreatedAt: at.Add(time.Second), State: VolumeReady}
	if err := s.InsertVolume(ctx, blue); err != nil {
		t.Fatalf("the same name in another team: %v", err)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetVolumeByName(ctx, "red", "data")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(red, got); d != "" {
		t.Errorf("volume after reopen (-want +got):\n%s", d)
	}
	if _, err := s.GetVolumeByName(ctx, "green", "data"); !errdefs.IsNotFound(err) {
		t.Errorf("another team's name: %v, want not found", err)
	}
	list, err := s.ListVolumes(ctx, "blue")
	if err != nil || len(list) != 1 || list[0].ID != "v3" {
		t.Errorf("blue's volumes: %v, %v", list, err)
	}
	if list, _ := s.ListVolumes(ctx, ""); len(list) != 2 {
		t.Errorf("every volume: %v", list)
	}
	if err := s.SetVolumeState(ctx, "v1", VolumeDeleting); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.GetVolume(ctx, "v1"); v.State != VolumeDeleting {
		t.Errorf("state %q after the change", v.State)
	}
	if err := s.DeleteVolume(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVolume(ctx, "v1"); !errdefs.IsNotFound(err) {
		t.Errorf("a deleted volume: %v", err)
	}
}

func TestVolumeHolders(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	at := time.Now().UTC()
	put := func(id, state string, vols ...string) *Sandbox {
		sb := &Sandbox{ID: id, State: state, StartedAt: at}
		for _, v := range vols {
			sb.VolumeMounts = append(sb.VolumeMounts, VolumeMount{Name: "n-" + v, VolumeID: v, Path: "/mnt/" + v})
		}
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	put("running", StateRunning, "vol1", "vol2")
	put("paused", StatePaused, "vol1")
	put("creating", StateCreating, "vol1")
	put("killed", StateKilled, "vol1")
	put("other", StateRunning, "vol10")
	src := put("gone", StateKilled, "vol3")
	if err := s.PutSnapshot(ctx, &Snapshot{ID: "snap", Team: DefaultTeam, CreatedAt: at, Source: *src}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id         string
		sandboxes, snaps []string
	}{
		{name: "live sandboxes", id: "vol1", sandboxes: []string{"running", "paused", "creating"}},
		{name: "one of several", id: "vol2", sandboxes: []string{"running"}},
		{name: "a snapshot", id: "vol3", snaps: []string{"snap"}},
		{name: "none", id: "vol4"},
		{name: "a pattern's characters", id: "vol%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbs, snaps, err := s.VolumeHolders(ctx, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.sandboxes, sbs, cmpSorted); d != "" {
				t.Errorf("sandboxes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.snaps, snaps, cmpSorted); d != "" {
				t.Errorf("snapshots (-want +got):\n%s", d)
			}
		})
	}
}

var cmpSorted = cmp.Transformer("sorted", func(in []string) map[string]bool {
	out := map[string]bool{}
	for _, s := range in {
		out[s] = true
	}
	return out
})
