package local_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

func TestSandboxLifecycle(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{
		Metadata: map[string]string{"suite": "lifecycle", "n": "1"},
		Envs:     map[string]string{"GREETING": "hello sandbox"},
		Timeout:  5 * time.Minute,
	})
	other := s.create(t, sdk.CreateOptions{Metadata: map[string]string{"suite": "lifecycle", "n": "2"}})

	if got := run(t, sb, `echo "$GREETING from $(whoami) in $PWD"`).Stdout; got != "hello sandbox from user in /home/user\n" {
		t.Errorf("env, user and cwd: got %q", got)
	}

	info, err := sb.GetInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "running" || info.Metadata["n"] != "1" || info.EnvdVersion == "" {
		t.Errorf("GetInfo = %+v, want running with metadata n=1 and an envd version", info)
	}

	t.Run("list by metadata", func(t *testing.T) {
		got, _, err := s.client.List(ctx, sdk.ListOptions{Metadata: map[string]string{"suite": "lifecycle", "n": "2"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].SandboxID != other.ID() {
			t.Errorf("List(n=2) = %+v, want only %s", got, other.ID())
		}
		var ids []string
		pager := s.client.NewPaginator(sdk.ListOptions{Metadata: map[string]string{"suite": "lifecycle"}, Limit: 1})
		for pager.HasNext() {
			page, err := pager.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				ids = append(ids, p.SandboxID)
			}
		}
		if d := cmp.Diff([]string{sb.ID(), other.ID()}, ids); d != "" {
			t.Errorf("paged listing (-want +got):\n%s", d)
		}
	})

	t.Run("set timeout", func(t *testing.T) {
		if err := sb.SetTimeout(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		info, err := sb.GetInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.EndAt); left < 50*time.Minute {
			t.Errorf("after SetTimeout(1h) the sandbox ends in %v", left)
		}
		if err := sb.SetTimeout(ctx, -time.Second); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SetTimeout(-1s) = %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("connect", func(t *testing.T) {
		again, err := s.client.Connect(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if got := run(t, again, "echo again").Stdout; got != "again\n" {
			t.Errorf("command after Connect: %q", got)
		}
	})

	t.Run("kill", func(t *testing.T) {
		if err := other.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.Kill(ctx); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("second Kill = %v, want ErrNotFound", err)
		}
		if _, err := s.client.Connect(ctx, other.ID()); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Connect(killed) = %v, want ErrNotFound", err)
		}
		if running, _ := other.IsRunning(ctx); running {
			t.Error("a killed sandbox reports running")
		}
	})
}

func TestUnknownSandbox(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	const id = "nosuchsandbox0000000"
	if _, err := s.client.Connect(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Connect(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.client.Kill(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Kill(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.client.Create(ctx, sdk.CreateOptions{Template: "no-such-template"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Create(unknown template) = %v, want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), "no-such-template") {
		t.Errorf("Create(unknown template) error %q does not name the template", err)
	}
	bad := []sdk.CreateOptions{
		{Envs: map[string]string{"BAD NAME": "x"}},
		{MemoryMB: 1},
		{MemoryMB: 1 << 30},
		{DiskMB: 1},
		{DiskMB: 1 << 30},
		// Would replace the agent's access token: an empty one turns its
		// check off.
		{Envs: map[string]string{"TUPPER_ACCESS_TOKEN": ""}},
		{Timeout: 1000 * time.Hour},
	}
	for _, opts := range bad {
		if _, err := s.client.Create(ctx, opts); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
	if ids := s.rt.Engine().Running(); len(ids) != 0 {
		t.Errorf("failed creates left sandboxes running: %v", ids)
	}
}

func TestTimeoutKillsSandbox(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Timeout: 2 * time.Second})
	testutil.WaitFor(t, time.Minute, "the sandbox to die by timeout", func() bool {
		_, err := sb.GetInfo(ctx)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	// It is gone for its users as soon as the kill starts; the record
	// says "killed" once the backend has stopped it.
	var killed []*engine.Sandbox
	testutil.WaitFor(t, time.Minute, "the killed record", func() bool {
		var err error
		killed, _, err = s.rt.Engine().List(ctx, engine.ListOptions{States: []string{"killed"}})
		return err == nil && len(killed) > 0
	})
	if len(killed) != 1 || killed[0].KillReason != "timeout" {
		t.Errorf("killed records = %+v, want one killed by timeout", killed)
	}
	if left := s.leftovers(t, nil, "", sb.ID()); len(left) > 0 {
		t.Errorf("the timed-out sandbox left:\n%s", strings.Join(left, "\n"))
	}
}

func TestRestartReattaches(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	doomed := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	short := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	h, err := sb.Commands.Start(ctx, "cat", sdk.WithStdin(true), sdk.WithTag("survivor"), sdk.WithTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	pid := h.PID()
	h.Disconnect()

	// Close the engine as a stopping daemon would: sandboxes keep running.
	s.rt.Close()
	s.rt = nil
	// While it is down, one sandbox's root process dies.
	testutil.CrashSandbox(t, doomed.ID())
	s.open(t)

	again, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatalf("connect after restart: %v", err)
	}
	h2, err := again.Commands.Connect(ctx, pid)
	if err != nil {
		t.Fatalf("re-attach to pid %d after restart: %v", pid, err)
	}
	if err := h2.SendStdin(ctx, []byte("still here\n")); err != nil {
		t.Fatal(err)
	}
	if err := h2.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := h2.Wait(ctx)
	if err != nil || res.Stdout != "still here\n" {
		t.Errorf("re-attached command: %+v, %v", res, err)
	}

	if _, err := s.client.Connect(ctx, doomed.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Connect(died while down) = %v, want ErrNotFound", err)
	}
	killed, _, _ := s.rt.Engine().List(ctx, engine.ListOptions{States: []string{"killed"}})
	if len(killed) != 1 || killed[0].ID != doomed.ID() {
		t.Errorf("killed records after restart = %+v, want %s reported killed", killed, doomed.ID())
	}

	// Timeouts still fire after a restart.
	shortAgain, err := s.client.Connect(ctx, short.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := shortAgain.SetTimeout(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "the re-attached sandbox to time out", func() bool {
		_, err := shortAgain.GetInfo(ctx)
		return errors.Is(err, errdefs.ErrNotFound)
	})
}

// TestCrashEndsOpenRequests checks that a command streaming from a sandbox
// that crashes ends with an error at once, instead of waiting minutes for
// TCP to notice that the sandbox's network is gone.
func TestCrashEndsOpenRequests(t *testing.T) {
	s := newStack(t, engine.Config{})
	sb := s.create(t, sdk.CreateOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := sb.Commands.Start(ctx, "echo started; sleep 600", sdk.WithTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	testutil.CrashSandbox(t, sb.ID())
	_, err = h.Wait(ctx)
	if err == nil {
		t.Fatal("Wait on a crashed sandbox's command succeeded")
	}
	if ctx.Err() != nil {
		t.Fatalf("Wait on a crashed sandbox's command returned only when the test gave up: %v", err)
	}
}
