package local_test

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// The template of these tests, as E2B's SDK would describe it:
// setStartCmd('python3 -m http.server ${PORT:-8000}', waitForURL('http://localhost:8000')),
// after setWorkdir('/srv'). A sandbox's environment may move the server
// elsewhere, which the ready check never sees, or break it.
var startCmdLabels = map[string]string{
	image.LabelStartCmd:     `echo "serving $PWD as $(id -un) on ${PORT:-8000}"; exec python3 -m http.server "${PORT:-8000}"`,
	image.LabelReadyCmd:     `curl -s -o /dev/null -w "%{http_code}" 'http://localhost:8000' | grep -q "200"`,
	image.LabelStartWorkdir: "/srv",
}

// startCmdImage returns the name of the test image with startCmdLabels
// (see testutil.LabelledImage).
func startCmdImage(t *testing.T, storeRoot, base string) string {
	t.Helper()
	return testutil.LabelledImage(t, storeRoot, base, "tupper-test/startcmd", startCmdLabels)
}

// TestStartCommand: a template's start command runs in every new
// sandbox, and create returns only once its ready check passes, so that
// a command right after create reaches the server. The command is listed
// under its tag, runs as the template's user in its directory with the
// sandbox's environment. A pause and a resume (with a restart of the
// daemon between) run nothing again. A start command that dies before it is ready
// fails the create at once, saying why; one that never gets ready fails
// it at the boot timeout; neither leaves anything behind.
func TestStartCommand(t *testing.T) {
	s := newStack(t, engine.Config{})
	tmpl := startCmdImage(t, s.cfg.ImageRoot, s.cfg.Engine.DefaultTemplate)
	ctx := context.Background()

	t.Run("ready when create returns", func(t *testing.T) {
		sb := s.create(t, sdk.CreateOptions{Template: tmpl})
		defer sb.Kill(ctx)
		// At once: no waiting, no retry.
		if got := run(t, sb, `curl -s -o /dev/null -w "%{http_code}" http://localhost:8000/`).Stdout; got != "200" {
			t.Fatalf("the server right after create answered %q, want 200", got)
		}
		procs, err := sb.Commands.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(procs, func(p sdk.ProcessInfo) bool { return p.Tag == "start-cmd" })
		if i < 0 || !slices.Contains(procs[i].Args, startCmdLabels[image.LabelStartCmd]) {
			t.Fatalf("listed %+v, want the start command tagged start-cmd", procs)
		}
		pid := procs[i].PID
		// The shell execs python: the listed process is the server.
		who := run(t, sb, "stat -c %U /proc/$PID; tr '\\0' ' ' </proc/$PID/cmdline", sdk.WithUser("root"), sdk.WithEnv(map[string]string{"PID": strconv.FormatUint(uint64(pid), 10)})).Stdout
		if want := "user\npython3 -m http.server 8000 "; who != want {
			t.Errorf("the start command's process: %q, want %q", who, want)
		}
		// It serves the directory it runs in.
		if got := run(t, sb, "touch /srv/in-the-workdir && curl -s http://localhost:8000/", sdk.WithUser("root")).Stdout; !strings.Contains(got, "in-the-workdir") {
			t.Errorf("the server's listing lacks a file of /srv:\n%s", got)
		}
	})

	t.Run("pause, restart, resume: nothing runs again", func(t *testing.T) {
		sb := s.create(t, sdk.CreateOptions{Template: tmpl, Timeout: 5 * time.Minute})
		startCmds := func(sb *sdk.Sandbox) []uint32 {
			t.Helper()
			procs, err := sb.Commands.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var pids []uint32
			for _, p := range procs {
				if p.Tag == "start-cmd" {
					pids = append(pids, p.PID)
				}
			}
			return pids
		}
		before := startCmds(sb)
		if err := s.rt.Engine().Pause(ctx, sb.ID(), true); err != nil {
			t.Fatal(err)
		}
		s.rt.Close()
		s.rt = nil
		s.open(t)
		again, err := s.client.Connect(ctx, sb.ID())
		if err != nil {
			t.Fatalf("connect resumes: %v", err)
		}
		// The handle of the runtime before the restart is closed.
		defer again.Kill(ctx)
		if after := startCmds(again); len(before) != 1 || !slices.Equal(after, before) {
			t.Errorf("start commands before the pause %v, after the resume %v: want the one, as it was", before, after)
		}
		if got := run(t, again, `curl -s -o /dev/null -w "%{http_code}" http://localhost:8000/`).Stdout; got != "200" {
			t.Errorf("the server after the resume answered %q, want 200", got)
		}
	})

	t.Run("start command dies", func(t *testing.T) {
		baseline := testutil.Tree(t, filepath.Join(s.cfg.Root, "backends"))
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := s.client.Create(cctx, sdk.CreateOptions{Template: tmpl, Envs: map[string]string{"PORT": "not-a-port"}})
		if err == nil {
			t.Fatal("create succeeded with a start command that cannot start its server")
		}
		t.Logf("create: %v", err)
		for _, want := range []string{"exit status 2", "invalid int value: 'not-a-port'", "serving /srv as user on not-a-port", startCmdLabels[image.LabelReadyCmd][:20]} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q", want)
			}
		}
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("error class: %v, want failed precondition", err)
		}
		s.noLeftovers(t, baseline, err)
	})

	t.Run("never ready", func(t *testing.T) {
		// The boot timeout bounds the wait; a stack of its own keeps the
		// other creates from a short one.
		short := newStack(t, engine.Config{BootTimeout: 10 * time.Second})
		baseline := testutil.Tree(t, filepath.Join(short.cfg.Root, "backends"))
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := short.client.Create(cctx, sdk.CreateOptions{Template: tmpl, Envs: map[string]string{"PORT": "8001"}})
		if err == nil {
			t.Fatal("create succeeded though the ready check never passes")
		}
		t.Logf("create: %v", err)
		for _, want := range []string{"not ready within the boot timeout", "waiting for the ready check", "serving /srv as user on 8001"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q", want)
			}
		}
		if !errors.Is(err, errdefs.ErrDeadlineExceeded) {
			t.Errorf("error class: %v, want deadline exceeded", err)
		}
		short.noLeftovers(t, baseline, err)
	})
}

// sandboxInError finds the id of the sandbox a failed create's error
// names: the sandbox is gone, and with it any other record of its id.
var sandboxInError = regexp.MustCompile(`sandbox "([a-z0-9]{20})"`)

// noLeftovers checks that the failed create err left nothing on the host
// beyond baseline (a tree of the stack's backends directory).
func (s *stack) noLeftovers(t *testing.T, baseline map[string]bool, err error) {
	t.Helper()
	m := sandboxInError.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("the error names no sandbox: %v", err)
	}
	var left []string
	// A cleanup that fails at once is retried in the background.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left = s.leftovers(t, baseline, "", m[1])
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("the failed create of %s left:\n%s", m[1], strings.Join(left, "\n"))
	}
	recs, _, lerr := s.rt.Engine().List(context.Background(), engine.ListOptions{})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(recs) != 0 {
		t.Errorf("the engine still lists %d sandboxes", len(recs))
	}
}
