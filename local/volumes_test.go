package local_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// newVolume makes a volume through the stack's Go SDK; the test's end
// kills the stack's sandboxes and deletes its volumes (they are loop
// mounts under its state directory).
func (s *stack) newVolume(t *testing.T, name string, sizeMB int) *sdk.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := s.client.CreateVolume(ctx, name, sizeMB)
	if err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.rt.Engine().KillAll(ctx)
		if err := s.client.DeleteVolume(ctx, v.ID); err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("delete volume %s: %v", v.ID, err)
		}
	})
	return v
}

// sh runs script in sb with sh and returns its output and exit code.
func sh(t *testing.T, sb *sdk.Sandbox, script string) (string, int) {
	t.Helper()
	res := run(t, sb, script+` ; echo "rc=$?"`)
	out := strings.TrimSpace(res.Stdout + res.Stderr)
	i := strings.LastIndex(out, "rc=")
	code := -1
	if i >= 0 {
		code = 0
		if out[i+3:] != "0" {
			code = 1
		}
		out = strings.TrimSpace(out[:i])
	}
	return out, code
}

// TestVolumeSharedBetweenSandboxes: two sandboxes on gVisor mount one
// volume at once, each sees what the other writes at its next read (no
// waiting), and what they wrote outlives both: a third sandbox, and the
// Go SDK without any sandbox, read it.
func TestVolumeSharedBetweenSandboxes(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	v := s.newVolume(t, "shared", 64)
	if _, err := v.WriteFile(ctx, "/from-sdk.txt", []byte("from the SDK")); err != nil {
		t.Fatal(err)
	}
	a := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "shared", Path: "/data"}}})
	b := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: v.ID, Path: "/home/user/shared"}}})

	if out, _ := sh(t, a, "cat /data/from-sdk.txt"); out != "from the SDK" {
		t.Errorf("a reads the SDK's file: %q", out)
	}
	steps := []struct {
		name      string
		sb        *sdk.Sandbox
		script    string
		want      string
		wantFails bool
	}{
		{name: "a writes", sb: a, script: "echo one > /data/a.txt && whoami"},
		{name: "b reads a's file", sb: b, script: "cat /home/user/shared/a.txt", want: "one"},
		{name: "a overwrites it longer", sb: a, script: "echo one-two-three > /data/a.txt"},
		{name: "b reads the new content", sb: b, script: "cat /home/user/shared/a.txt", want: "one-two-three"},
		{name: "a appends", sb: a, script: "echo four >> /data/a.txt"},
		{name: "b reads the appended line", sb: b, script: "tail -n 1 /home/user/shared/a.txt", want: "four"},
		{name: "b makes a directory and a file", sb: b, script: "mkdir -p /home/user/shared/dir && echo bee > /home/user/shared/dir/b.txt"},
		{name: "a lists and reads them", sb: a, script: "ls /data/dir && cat /data/dir/b.txt", want: "b.txt\nbee"},
		{name: "b removes a's file", sb: b, script: "rm /home/user/shared/a.txt"},
		{name: "a no longer finds it", sb: a, script: "cat /data/a.txt", wantFails: true},
		{name: "root writes too", sb: a, script: "sudo -n true 2>/dev/null; echo r > /data/r.txt; cat /data/r.txt", want: "r"},
	}
	for _, st := range steps {
		out, code := sh(t, st.sb, st.script)
		if st.wantFails != (code != 0) || st.want != "" && out != st.want {
			t.Errorf("%s: %q exit %d; want %q, failure %v", st.name, out, code, st.want, st.wantFails)
		}
	}
	if got, err := v.ReadFile(ctx, "/dir/b.txt"); err != nil || string(got) != "bee\n" {
		t.Errorf("the SDK reads b's file: %q, %v", got, err)
	}

	if err := s.client.DeleteVolume(ctx, v.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("delete of a volume two sandboxes mount: %v, want a conflict", err)
	}
	for _, sb := range []*sdk.Sandbox{a, b} {
		if err := sb.Kill(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "shared", Path: "/mnt/v"}}})
	if out, _ := sh(t, c, "cat /mnt/v/dir/b.txt /mnt/v/from-sdk.txt"); out != "bee\nfrom the SDK" {
		t.Errorf("a third sandbox, once both are gone: %q", out)
	}
	list, err := v.List(ctx, "/", 2)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "/dir /dir/b.txt /from-sdk.txt /r.txt" {
		t.Errorf("the volume holds %v", paths)
	}
}

// TestVolumeCapInSandbox: a sandbox that writes past its volume's size
// gets ENOSPC and lives on; the SDK's upload past it fails as full and
// keeps the old file; the host's disk holds no more than the size.
func TestVolumeCapInSandbox(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	v := s.newVolume(t, "small", 32)
	sb := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "small", Path: "/data"}}})
	out, code := sh(t, sb, "dd if=/dev/zero of=/data/fill bs=1M count=64 2>&1")
	if code == 0 || !strings.Contains(out, "No space left on device") {
		t.Errorf("a 64 MiB write to a 32 MiB volume: %q exit %d, want ENOSPC", out, code)
	}
	if out, _ := sh(t, sb, "echo alive"); out != "alive" {
		t.Errorf("the sandbox after ENOSPC: %q", out)
	}
	if _, err := v.Write(ctx, "/more", bytes.NewReader(make([]byte, 1<<20))); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a 1 MiB write to the full volume: %v, want full", err)
	}
	sh(t, sb, "rm /data/fill")
	if _, err := v.WriteFile(ctx, "/keep.txt", []byte("old")); err != nil {
		t.Fatalf("a write once there is room: %v", err)
	}
	_, err := v.Write(ctx, "/keep.txt", bytes.NewReader(make([]byte, 40<<20)))
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a 40 MiB upload to a 32 MiB volume: %v, want full", err)
	}
	if out, _ := sh(t, sb, "cat /data/keep.txt"); out != "old" {
		t.Errorf("the file after the failed upload, in the sandbox: %q", out)
	}
}

// TestVolumeAcrossPause: a paused sandbox keeps its volume: while it is
// paused another sandbox writes there, the volume cannot be deleted (the
// paused sandbox holds it), and once resumed the sandbox's process, whose
// working directory is in the volume, reads the new file and its own; a
// snapshot of it starts a sandbox with the volume mounted too.
func TestVolumeAcrossPause(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	eng := s.rt.Engine()
	v := s.newVolume(t, "kept", 64)
	a := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "kept", Path: "/data"}}})
	sh(t, a, "mkdir -p /data/work && echo before > /data/work/mine.txt")
	if _, err := a.Commands.Start(ctx, "cd /data/work && while :; do cat new.txt > seen.txt 2>/dev/null; sleep 0.1; done"); err != nil {
		t.Fatal(err)
	}
	if err := eng.Pause(ctx, a.ID(), true); err != nil {
		t.Fatalf("pause a sandbox with a volume: %v", err)
	}
	b := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "kept", Path: "/data"}}})
	sh(t, b, "echo while-paused > /data/work/new.txt")
	if err := b.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.client.DeleteVolume(ctx, v.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), a.ID()) {
		t.Errorf("delete of a volume a paused sandbox mounts: %v, want a conflict naming it", err)
	}
	a, err := s.client.Connect(ctx, a.ID())
	if err != nil {
		t.Fatalf("resume a sandbox with a volume: %v", err)
	}
	if out, _ := sh(t, a, "cat /data/work/mine.txt /data/work/new.txt"); out != "before\nwhile-paused" {
		t.Errorf("after the resume: %q", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := sh(t, a, "cat /data/work/seen.txt")
		if out == "while-paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed process never saw the new file: seen.txt holds %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	snap, err := a.CreateSnapshot(ctx, "")
	if err != nil {
		t.Fatalf("snapshot a sandbox with a volume: %v", err)
	}
	c, err := s.client.Create(ctx, sdk.CreateOptions{Template: snap.SnapshotID})
	if err != nil {
		t.Fatalf("start a sandbox from the snapshot: %v", err)
	}
	sh(t, a, "echo after-snapshot > /data/after.txt")
	if out, _ := sh(t, c, "cat /data/after.txt"); out != "after-snapshot" {
		t.Errorf("the snapshot's sandbox does not share the volume: %q", out)
	}
	if _, err := s.client.Create(ctx, sdk.CreateOptions{Template: snap.SnapshotID, VolumeMounts: []sdk.VolumeMount{{Name: "kept", Path: "/other"}}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a create from a snapshot with mounts of its own: %v, want invalid argument", err)
	}
	for _, sb := range []*sdk.Sandbox{a, c} {
		sb.Kill(ctx)
	}
	if err := s.client.DeleteVolume(ctx, v.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), snap.SnapshotID) {
		t.Errorf("delete of a volume a snapshot mounts: %v, want a conflict naming it", err)
	}
	if err := s.client.DeleteSnapshot(ctx, snap.SnapshotID); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeOnRunc: a runc sandbox mounts a volume too. Its user
// namespace maps none of the volume's host owners (files show as
// nobody's), so the volume's top is open to all: the sandbox reads what
// the SDK wrote and writes what the SDK reads.
func TestVolumeOnRunc(t *testing.T) {
	s := newStackOn(t, "runc", engine.Config{}, backend.NetworkConfig{})
	ctx := context.Background()
	v := s.newVolume(t, "runcvol", 32)
	if _, err := v.WriteFile(ctx, "/from-sdk.txt", []byte("from the SDK")); err != nil {
		t.Fatal(err)
	}
	sb := s.create(t, sdk.CreateOptions{VolumeMounts: []sdk.VolumeMount{{Name: "runcvol", Path: "/data"}}})
	if out, code := sh(t, sb, "cat /data/from-sdk.txt && echo from-runc > /data/from-runc.txt"); code != 0 || out != "from the SDK" {
		t.Errorf("in the runc sandbox: %q exit %d", out, code)
	}
	if got, err := v.ReadFile(ctx, "/from-runc.txt"); err != nil || string(got) != "from-runc\n" {
		t.Errorf("the SDK reads the runc sandbox's file: %q, %v", got, err)
	}
}
