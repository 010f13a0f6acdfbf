package sdk_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestRemoteCheckpoints pauses, resumes, snapshots and forks sandboxes of
// a real server through the HTTP transport.
func TestRemoteCheckpoints(t *testing.T) {
	url, key := remoteServer(t)
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	c := &sdk.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	must := func(res *sdk.CommandResult, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Stdout
	}
	count := func(sb *sdk.Sandbox) int {
		t.Helper()
		n, _ := strconv.Atoi(strings.TrimSpace(must(sb.Commands.Run(ctx, "cat /tmp/ticks 2>/dev/null || true"))))
		return n
	}
	// counting checks that sb still runs the counter from past since,
	// and keeps /tmp/kept: its processes, memory and files came back.
	counting := func(sb *sdk.Sandbox, since int) {
		t.Helper()
		if got := must(sb.Commands.Run(ctx, "cat /tmp/kept")); got != "kept\n" {
			t.Errorf("/tmp/kept holds %q", got)
		}
		if h, err := sb.Commands.ConnectTag(ctx, "counter"); err != nil {
			t.Errorf("the counting process is gone: %v", err)
		} else {
			h.Disconnect()
		}
		testutil.WaitFor(t, 10*time.Second, "the count to go on from "+strconv.Itoa(since), func() bool { return count(sb) > since })
	}

	sb, err := c.Create(ctx, sdk.CreateOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Commands.Start(ctx, "i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.2; done", sdk.WithTag("counter"), sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	must(sb.Commands.Run(ctx, "echo kept > /tmp/kept"))
	testutil.WaitFor(t, 20*time.Second, "the counter to count", func() bool { return count(sb) > 0 })

	t.Run("pause and connect", func(t *testing.T) {
		before := count(sb)
		if err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := sb.GetInfo(ctx)
		if err != nil || info.State != "paused" {
			t.Fatalf("GetInfo after pause = %+v, %v; want paused", info, err)
		}
		if err := sb.Pause(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("a second pause = %v, want a failed precondition", err)
		}
		again, err := c.Connect(ctx, sb.ID())
		if err != nil {
			t.Fatalf("connect resumes: %v", err)
		}
		if again.Info().State != "running" || again.Info().EnvdAccessToken != sb.Info().EnvdAccessToken {
			t.Errorf("connect answered %+v", again.Info())
		}
		counting(again, before)
	})

	t.Run("snapshot", func(t *testing.T) {
		sn, err := sb.CreateSnapshot(ctx, "remote-warm")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(sn.SnapshotID, "snap-") || sn.SandboxID != sb.ID() || len(sn.Names) != 1 || sn.CreatedAt.IsZero() {
			t.Errorf("snapshot = %+v", sn)
		}
		from, err := c.Create(ctx, sdk.CreateOptions{Template: "remote-warm", Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("create from the snapshot's name: %v", err)
		}
		if from.ID() == sb.ID() || from.Info().EnvdAccessToken == sb.Info().EnvdAccessToken {
			t.Errorf("the sandbox from the snapshot has the source's id or token: %+v", from.Info())
		}
		counting(from, 0)
		list, _, err := c.ListSnapshots(ctx, sdk.SnapshotListOptions{Name: "remote-warm"})
		if err != nil || len(list) != 1 || list[0].SnapshotID != sn.SnapshotID {
			t.Errorf("ListSnapshots(remote-warm) = %+v, %v", list, err)
		}
		if err := c.DeleteSnapshot(ctx, sn.SnapshotID); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteSnapshot(ctx, "remote-warm"); !sdk.IsNotFound(err) {
			t.Errorf("delete of a deleted snapshot = %v, want not found", err)
		}
	})

	t.Run("fork", func(t *testing.T) {
		before := count(sb)
		forks, err := sb.Fork(ctx, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(forks) != 2 {
			t.Fatalf("fork of 2: %d results", len(forks))
		}
		ids := map[string]bool{sb.ID(): true}
		tokens := map[string]bool{sb.Info().EnvdAccessToken: true}
		for i, f := range forks {
			if f.Err != nil {
				t.Errorf("fork %d: %v", i, f.Err)
				continue
			}
			info := f.Sandbox.Info()
			if ids[info.SandboxID] || tokens[info.EnvdAccessToken] {
				t.Errorf("fork %d: id %s or token reused", i, info.SandboxID)
			}
			ids[info.SandboxID], tokens[info.EnvdAccessToken] = true, true
			counting(f.Sandbox, before)
		}
	})

	t.Run("pause at the timeout", func(t *testing.T) {
		short, err := c.Create(ctx, sdk.CreateOptions{Timeout: 2 * time.Second, OnTimeout: sdk.OnTimeoutPause})
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, time.Minute, "the sandbox to pause at its timeout", func() bool {
			info, err := short.GetInfo(ctx)
			return err == nil && info.State == "paused"
		})
		if _, err := c.Create(ctx, sdk.CreateOptions{AutoResume: true}); !sdk.IsInvalidArgument(err) {
			t.Errorf("AutoResume without a pause at the timeout = %v, want an invalid argument", err)
		}
	})
}
