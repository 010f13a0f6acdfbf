package local_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// These tests drive pause, snapshots and fork through the Go SDK on the
// in-process Runtime (sdk.CheckpointTransport); pause_test.go drives the
// engine itself.

// counterTag tags the counting process startCounter starts.
const counterTag = "counter"

// startCounter starts, in sb, a shell that counts up in /tmp/ticks (its
// count lives in the shell's memory), tagged counterTag, and writes
// /tmp/kept; it returns once the count has begun.
func startCounter(t *testing.T, sb *sdk.Sandbox) {
	t.Helper()
	ctx := context.Background()
	if _, err := sb.Commands.Start(ctx, "i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.2; done",
		sdk.WithTag(counterTag), sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	run(t, sb, "echo kept > /tmp/kept")
	testutil.WaitFor(t, 20*time.Second, "the counter to count", func() bool { return ticks(t, sb) > 0 })
}

// ticks reads the counter's count; 0 when there is none yet.
func ticks(t *testing.T, sb *sdk.Sandbox) int {
	t.Helper()
	res, err := sb.Commands.Run(context.Background(), "cat /tmp/ticks 2>/dev/null || true")
	if err != nil {
		t.Fatalf("read the count: %v", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	return n
}

// checkCounter checks in sb what startCounter left: the counting process
// is there under its tag, counts on from at least since, and /tmp/kept
// holds its line.
func checkCounter(t *testing.T, sb *sdk.Sandbox, since int) {
	t.Helper()
	ctx := context.Background()
	if res := run(t, sb, "cat /tmp/kept"); res.Stdout != "kept\n" {
		t.Errorf("/tmp/kept holds %q, want kept", res.Stdout)
	}
	procs, err := sb.Commands.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tagged := false
	for _, p := range procs {
		tagged = tagged || p.Tag == counterTag
	}
	if !tagged {
		t.Errorf("no process tagged %q among %+v: the agent lost its processes", counterTag, procs)
	}
	// A counter that started over would count from 1 again.
	testutil.WaitFor(t, 10*time.Second, "the counter to count on from "+strconv.Itoa(since), func() bool {
		return ticks(t, sb) > since
	})
}

func TestSDKPauseAndConnect(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	startCounter(t, sb)

	before := ticks(t, sb)
	if err := sb.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	info, err := sb.GetInfo(ctx)
	if err != nil || info.State != "paused" {
		t.Fatalf("GetInfo after pause = %+v, %v; want state paused", info, err)
	}
	listed, _, err := s.client.List(ctx, sdk.ListOptions{States: []string{"paused"}})
	if err != nil || len(listed) != 1 || listed[0].SandboxID != sb.ID() || listed[0].State != "paused" {
		t.Errorf("List(paused) = %+v, %v; want the sandbox", listed, err)
	}
	if err := sb.Pause(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a second pause = %v, want a failed precondition", err)
	}

	again, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatalf("connect to the paused sandbox: %v", err)
	}
	if st := again.Info().State; st != "running" {
		t.Errorf("connect answered state %q, want running", st)
	}
	checkCounter(t, again, before)
	// The handle of before the pause works again too.
	if res := run(t, sb, "echo same"); res.Stdout != "same\n" {
		t.Errorf("the old handle after resume: %q", res.Stdout)
	}

	// Resume of a sandbox that runs is a connect that extends its life.
	resumed, err := s.client.Resume(ctx, sb.ID(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(resumed.Info().EndAt); left < 50*time.Minute {
		t.Errorf("after Resume(1h) the sandbox ends in %v", left)
	}
	if _, err := s.client.Resume(ctx, sb.ID(), -time.Second); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Resume(-1s) = %v, want an invalid argument", err)
	}
	if err := s.client.Pause(ctx, "nope"); !sdk.IsNotFound(err) {
		t.Errorf("pause of an unknown sandbox = %v, want not found", err)
	}
}

func TestSDKSnapshotCreateAndFork(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	src := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	startCounter(t, src)

	sn, err := src.CreateSnapshot(ctx, "sdk-prepared")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if !strings.HasPrefix(sn.SnapshotID, "snap-") || len(sn.Names) != 1 || sn.Names[0] != "sdk-prepared" || sn.SandboxID != src.ID() || sn.CreatedAt.IsZero() || sn.SizeBytes <= 0 {
		t.Errorf("snapshot = %+v", sn)
	}
	if _, err := src.CreateSnapshot(ctx, "sdk-prepared"); !sdk.IsAlreadyExists(err) {
		t.Errorf("a second snapshot of that name = %v, want already exists", err)
	}
	count := ticks(t, src)
	run(t, src, "echo later > /tmp/later")

	seen := map[string]bool{src.ID(): true}
	tokens := map[string]bool{src.Info().EnvdAccessToken: true}
	own := func(what string, sb *sdk.Sandbox) {
		t.Helper()
		if seen[sb.ID()] || tokens[sb.Info().EnvdAccessToken] {
			t.Errorf("%s: id %s or its access token is another sandbox's", what, sb.ID())
		}
		seen[sb.ID()], tokens[sb.Info().EnvdAccessToken] = true, true
	}
	for _, ref := range []string{sn.SnapshotID, "sdk-prepared"} {
		sb, err := s.client.Create(ctx, sdk.CreateOptions{Template: ref, Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("create from snapshot %s: %v", ref, err)
		}
		own("sandbox from "+ref, sb)
		checkCounter(t, sb, 0)
		if res, err := sb.Commands.Run(ctx, "test -e /tmp/later"); err == nil || res == nil || res.ExitCode == 0 {
			t.Errorf("the sandbox from %s sees a file written after the snapshot", ref)
		}
	}

	forks, err := src.Fork(ctx, 2, 5*time.Minute)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(forks) != 2 {
		t.Fatalf("fork of 2 answered %d results", len(forks))
	}
	for i, f := range forks {
		if f.Err != nil || f.Sandbox == nil {
			t.Errorf("fork %d: %v", i, f.Err)
			continue
		}
		own("fork "+strconv.Itoa(i), f.Sandbox)
		if st := f.Sandbox.Info().State; st != "running" {
			t.Errorf("fork %d: state %q", i, st)
		}
		if res := run(t, f.Sandbox, "cat /tmp/later"); res.Stdout != "later\n" {
			t.Errorf("fork %d does not see the source's file: %q", i, res.Stdout)
		}
		checkCounter(t, f.Sandbox, count)
	}
	if _, err := src.Fork(ctx, 0, 0); !sdk.IsInvalidArgument(err) {
		t.Errorf("fork of 0 = %v, want an invalid argument", err)
	}

	list, next, err := s.client.ListSnapshots(ctx, sdk.SnapshotListOptions{SandboxID: src.ID()})
	if err != nil || next != "" || len(list) != 1 || list[0].SnapshotID != sn.SnapshotID {
		t.Errorf("ListSnapshots of the source = %+v, %q, %v; want the one snapshot", list, next, err)
	}
	if err := s.client.DeleteSnapshot(ctx, "sdk-prepared"); err != nil {
		t.Fatalf("delete snapshot: %v", err)
	}
	if err := s.client.DeleteSnapshot(ctx, sn.SnapshotID); !sdk.IsNotFound(err) {
		t.Errorf("delete of a deleted snapshot = %v, want not found", err)
	}
	if list, _, err := s.client.ListSnapshots(ctx, sdk.SnapshotListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("ListSnapshots after the delete = %+v, %v; want none", list, err)
	}
	if _, err := s.client.Create(ctx, sdk.CreateOptions{Template: sn.SnapshotID}); err == nil {
		t.Error("create from a deleted snapshot succeeded")
	}
}

func TestSDKOnTimeoutPause(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Timeout: 3 * time.Second, OnTimeout: sdk.OnTimeoutPause, AutoResume: true})
	run(t, sb, "echo before > /tmp/mark")
	testutil.WaitFor(t, time.Minute, "the sandbox to pause at its timeout", func() bool {
		info, err := sb.GetInfo(ctx)
		return err == nil && info.State == "paused"
	})
	// AutoResume: the handle's next command wakes it.
	if res := run(t, sb, "cat /tmp/mark"); res.Stdout != "before\n" {
		t.Errorf("after the automatic resume: %q", res.Stdout)
	}

	for name, opts := range map[string]sdk.CreateOptions{
		"unknown OnTimeout":        {OnTimeout: "sleep"},
		"AutoResume without pause": {AutoResume: true},
		"AutoResume of files only": {OnTimeout: sdk.OnTimeoutPause, AutoResume: true, PauseFilesOnly: true},
	} {
		if _, err := s.client.Create(ctx, opts); !sdk.IsInvalidArgument(err) {
			t.Errorf("%s: create = %v, want an invalid argument", name, err)
		}
	}
}
