package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/backendtest"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/volume"
)

// newVolumeEngine is newEngineOn for tests that make volumes: they are
// loop mounts, removed before the engine's directory is.
func newVolumeEngine(t *testing.T, b backend.Backend) *Engine {
	t.Helper()
	testutil.RequiresRoot(t)
	e := newEngineOn(t, b, nil)
	t.Cleanup(func() {
		e.KillAll(context.Background())
		vols, _ := e.store.ListVolumes(context.Background(), "")
		for _, v := range vols {
			if err := volume.Remove(e.volumeDir(v.ID)); err != nil {
				t.Errorf("remove volume %s: %v", v.ID, err)
			}
		}
	})
	return e
}

func TestVolumesAreTheTeams(t *testing.T) {
	e := newVolumeEngine(t, backendtest.NewFake())
	red := WithScope(context.Background(), Scope{Team: "red", Key: "key_r"})
	blue := WithScope(context.Background(), Scope{Team: "blue", Key: "key_b"})

	v, err := e.CreateVolume(red, "data", 32)
	if err != nil {
		t.Fatal(err)
	}
	if v.Team != "red" || v.Creator != "key_r" || v.SizeBytes != 32<<20 || len(v.Token) < 32 {
		t.Errorf("volume %+v", v)
	}
	if _, err := e.CreateVolume(red, "data", 32); !errdefs.IsAlreadyExists(err) {
		t.Errorf("a second red volume named data: %v, want already exists", err)
	}
	if _, err := e.CreateVolume(blue, "data", 32); err != nil {
		t.Errorf("blue's own volume named data: %v", err)
	}
	if _, err := e.GetVolume(blue, v.ID); !errdefs.IsNotFound(err) {
		t.Errorf("blue gets red's volume: %v, want not found", err)
	}
	if err := e.DeleteVolume(blue, v.ID); !errdefs.IsNotFound(err) {
		t.Errorf("blue deletes red's volume: %v, want not found", err)
	}
	if list, _ := e.ListVolumes(blue); len(list) != 1 || list[0].Team != "blue" {
		t.Errorf("blue's listing: %v", list)
	}
	if _, err := e.Create(blue, CreateOptions{VolumeMounts: []VolumeMount{{Name: v.ID, Path: "/data"}}}); !errdefs.IsNotFound(err) {
		t.Errorf("blue mounts red's volume by id: %v, want not found", err)
	}
	if list, _ := e.ListVolumes(context.Background()); len(list) != 2 {
		t.Errorf("the operator's listing: %v", list)
	}
	if _, _, err := e.OpenVolume(context.Background(), v.ID, "wrong"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("content with a wrong token: %v, want unauthenticated", err)
	}
	if _, _, err := e.OpenVolume(context.Background(), "nope", v.Token); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("content of an unknown volume: %v, want unauthenticated as a wrong token", err)
	}
	fs, _, err := e.OpenVolume(context.Background(), v.ID, v.Token)
	if err != nil {
		t.Fatal(err)
	}
	fs.Close()
}

func TestCreateVolumeRefuses(t *testing.T) {
	e := newVolumeEngine(t, backendtest.NewFake())
	ctx := context.Background()
	tests := []struct {
		name   string
		volume string
		sizeMB int
	}{
		{name: "a slash", volume: "a/b", sizeMB: 32},
		{name: "dot dot", volume: "..", sizeMB: 32},
		{name: "a leading dot", volume: ".hidden", sizeMB: 32},
		{name: "empty", volume: "", sizeMB: 32},
		{name: "too long", volume: strings.Repeat("a", 64), sizeMB: 32},
		{name: "too small", volume: "small", sizeMB: 1},
		{name: "too big", volume: "big", sizeMB: MaxVolumeMB + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.CreateVolume(ctx, tt.volume, tt.sizeMB); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("CreateVolume(%q, %d): %v, want invalid argument", tt.volume, tt.sizeMB, err)
			}
		})
	}
	if entries, _ := os.ReadDir(e.volumeDir("")); len(entries) != 0 {
		t.Errorf("refused creates left %v", entries)
	}
}

func TestVolumeMountsAtCreate(t *testing.T) {
	b := backendtest.NewFake()
	e := newVolumeEngine(t, b)
	ctx := context.Background()
	v, err := e.CreateVolume(ctx, "data", 32)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.Create(ctx, CreateOptions{VolumeMounts: []VolumeMount{{Name: "data", Path: "/mnt/data/"}, {Name: v.ID, Path: "/home/user/again"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []VolumeMount{{Name: "data", VolumeID: v.ID, Path: "/mnt/data"}, {Name: "data", VolumeID: v.ID, Path: "/home/user/again"}}
	if d := cmp.Diff(want, sb.VolumeMounts); d != "" {
		t.Errorf("recorded mounts (-want +got):\n%s", d)
	}
	data := volume.DataDir(e.volumeDir(v.ID))
	wantSpec := []backend.Mount{{Source: data, Destination: "/mnt/data"}, {Source: data, Destination: "/home/user/again"}}
	if d := cmp.Diff(wantSpec, b.Spec(sb.ID).Mounts); d != "" {
		t.Errorf("the backend's mounts (-want +got):\n%s", d)
	}

	err = e.DeleteVolume(ctx, v.ID)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), sb.ID) {
		t.Fatalf("delete of a mounted volume: %v, want failed precondition naming %s", err, sb.ID)
	}
	if _, err := e.GetVolume(ctx, v.ID); err != nil {
		t.Errorf("the volume after a refused delete: %v", err)
	}
	if err := e.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatalf("delete once its sandbox is gone: %v", err)
	}
	if _, err := os.Stat(e.volumeDir(v.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted volume's directory: %v", err)
	}
	if _, err := e.Create(ctx, CreateOptions{VolumeMounts: []VolumeMount{{Name: "data", Path: "/data"}}}); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `"data"`) {
		t.Errorf("a create mounting a deleted volume: %v, want not found naming it", err)
	}
}

func TestVolumeMountPathsRefused(t *testing.T) {
	e := newVolumeEngine(t, backendtest.NewFake())
	ctx := context.Background()
	if _, err := e.CreateVolume(ctx, "v", 32); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		paths []string
	}{
		{name: "relative", paths: []string{"data"}},
		{name: "the root", paths: []string{"/"}},
		{name: "the root, spelt long", paths: []string{"/x/.."}},
		{name: "proc", paths: []string{"/proc"}},
		{name: "under dev", paths: []string{"/dev/shm/v"}},
		{name: "under sys, through dot dot", paths: []string{"/home/../sys/fs"}},
		{name: "the agent's", paths: []string{backend.AgentMountDir}},
		{name: "etc", paths: []string{"/etc/"}},
		{name: "resolv.conf", paths: []string{"/etc/resolv.conf"}},
		{name: "a control character", paths: []string{"/data\n"}},
		{name: "twice", paths: []string{"/data", "/data"}},
		{name: "nested", paths: []string{"/data", "/data/inner"}},
		{name: "too many", paths: strings.Split("/a /b /c /d /e /f /g /h /i /j /k /l /m /n /o /p /q", " ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mounts []VolumeMount
			for _, p := range tt.paths {
				mounts = append(mounts, VolumeMount{Name: "v", Path: p})
			}
			if _, err := e.Create(ctx, CreateOptions{VolumeMounts: mounts}); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("mounts at %q: %v, want invalid argument", tt.paths, err)
			}
		})
	}
	if list, _, _ := e.List(ctx, ListOptions{}); len(list) != 0 {
		t.Errorf("refused creates left sandboxes: %v", list)
	}
}

// TestMountVolumesAfterRestart: a volume made before a restart (here an
// unmount, as a host reboot leaves it) is mounted again by MountVolumes,
// with what it held, and half-made volumes are cleaned up.
func TestMountVolumesAfterRestart(t *testing.T) {
	e := newVolumeEngine(t, backendtest.NewFake())
	ctx := context.Background()
	v, err := e.CreateVolume(ctx, "keep", 32)
	if err != nil {
		t.Fatal(err)
	}
	dir := e.volumeDir(v.ID)
	if err := os.WriteFile(volume.DataDir(dir)+"/f", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := volume.Unmount(dir); err != nil {
		t.Fatal(err)
	}
	half := &Volume{ID: "half", Team: DefaultTeam, Name: "half", State: "creating"}
	if err := e.store.InsertVolume(ctx, half); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.volumeDir("half"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.MountVolumes(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(volume.DataDir(dir) + "/f")
	if err != nil || string(got) != "kept" {
		t.Errorf("after MountVolumes: %q, %v", got, err)
	}
	if _, err := e.store.GetVolume(ctx, "half"); !errdefs.IsNotFound(err) {
		t.Errorf("the half-made volume's record: %v", err)
	}
	if _, err := os.Stat(e.volumeDir("half")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the half-made volume's directory: %v", err)
	}
}

// TestVolumeCreateRacesDelete creates sandboxes that mount a volume while
// the volume is deleted: either the delete wins and the create fails, or
// the create wins and the delete is refused; never a sandbox whose volume
// is gone.
func TestVolumeCreateRacesDelete(t *testing.T) {
	e := newVolumeEngine(t, backendtest.NewFake())
	ctx := context.Background()
	for i := range 8 {
		name := fmt.Sprintf("race%d", i)
		v, err := e.CreateVolume(ctx, name, 16)
		if err != nil {
			t.Fatal(err)
		}
		var (
			sb        *Sandbox
			createErr error
			deleteErr error
			wg        sync.WaitGroup
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			sb, createErr = e.Create(ctx, CreateOptions{VolumeMounts: []VolumeMount{{Name: name, Path: "/data"}}})
		}()
		go func() {
			defer wg.Done()
			deleteErr = e.DeleteVolume(ctx, v.ID)
		}()
		wg.Wait()
		switch {
		case createErr == nil && deleteErr == nil:
			t.Fatalf("round %d: both the create (%s) and the delete of its volume succeeded", i, sb.ID)
		case createErr != nil && deleteErr != nil:
			// Both may lose (the create saw the mark of a delete that
			// then saw its record); then the volume is still there.
			if _, err := e.GetVolume(ctx, v.ID); err != nil {
				t.Errorf("round %d: both failed (%v; %v) and the volume is gone: %v", i, createErr, deleteErr, err)
			}
		case createErr == nil:
			if !errors.Is(deleteErr, errdefs.ErrFailedPrecondition) {
				t.Errorf("round %d: the delete failed with %v, want a conflict", i, deleteErr)
			}
			if _, err := os.Stat(volume.DataDir(e.volumeDir(v.ID))); err != nil {
				t.Errorf("round %d: the running sandbox's volume: %v", i, err)
			}
		}
	}
}
