package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// holdValue starts, in sb, a Python process that holds value in its memory
// only and serves it on port, and a shell loop that counts up in
// /tmp/count; and writes files in /tmp and the user's home.
func holdValue(t *testing.T, sb *sdk.Sandbox, value string, port int) {
	t.Helper()
	ctx := context.Background()
	server := `import http.server, sys
v = sys.argv[1].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(v)
    def log_message(self, *a): pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[2])), H).serve_forever()
`
	if _, err := sb.Files.Write(ctx, "/tmp/server.py", []byte(server)); err != nil {
		t.Fatal(err)
	}
	// The value reaches the process on its command line, and the file
	// that held the script goes: only the process's memory keeps it.
	for _, cmd := range []string{
		"python3 /tmp/server.py " + value + " " + strconv.Itoa(port),
		"i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done",
	} {
		if _, err := sb.Commands.Start(ctx, cmd, sdk.WithTimeout(0)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 20*time.Second, "the Python server to answer", func() bool {
		res, err := sb.Commands.Run(ctx, "curl -sf localhost:"+strconv.Itoa(port))
		return err == nil && res.Stdout == value
	})
	run(t, sb, "rm /tmp/server.py; echo in-tmp > /tmp/kept; echo in-home > ~/kept")
}

// checkHeld checks in sb what holdValue left: the server answers value,
// the counter counts on, and the files are there.
func checkHeld(t *testing.T, sb *sdk.Sandbox, value string, port int) {
	t.Helper()
	if res := run(t, sb, "curl -sf localhost:"+strconv.Itoa(port)); res.Stdout != value {
		t.Errorf("the Python process answers %q, want %q (its memory was lost)", res.Stdout, value)
	}
	if res := run(t, sb, "cat /tmp/kept ~/kept"); res.Stdout != "in-tmp\nin-home\n" {
		t.Errorf("files after resume: %q", res.Stdout)
	}
	count := func() int {
		n, _ := strconv.Atoi(strings.TrimSpace(run(t, sb, "cat /tmp/count").Stdout))
		return n
	}
	first := count()
	testutil.WaitFor(t, 10*time.Second, "the counting process to count on", func() bool { return count() > first })
}

func TestPauseResumeKeepsProcessesAndFiles(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	holdValue(t, sb, "v-4711", 8001)
	eng := s.rt.Engine()

	if err := eng.Pause(ctx, sb.ID(), true); err != nil {
		t.Fatal(err)
	}
	info, err := eng.Get(ctx, sb.ID())
	if err != nil || info.State != store.StatePaused {
		t.Fatalf("after pause: %+v, %v; want paused", info, err)
	}
	if err := eng.Pause(ctx, sb.ID(), true); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("pause of a paused sandbox: %v, want failed precondition", err)
	}
	// A paused sandbox answers no command: it says why.
	if _, err := sb.Commands.Run(ctx, "true"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("command on a paused sandbox: %v, want an error saying it is paused", err)
	}
	// Nothing of it runs on the host: its memory is free.
	if pids := testutil.ProcessesOf(sb.ID()); len(pids) > 0 {
		t.Errorf("host processes %v of the paused sandbox still run", pids)
	}
	listed, _, err := eng.List(ctx, engine.ListOptions{})
	if err != nil || len(listed) != 1 || listed[0].State != store.StatePaused {
		t.Errorf("list while paused: %+v, %v", listed, err)
	}

	// The daemon restarts while the sandbox is paused.
	s.rt.Close()
	s.rt = nil
	s.open(t)
	eng = s.rt.Engine()

	again, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatalf("connect resumes: %v", err)
	}
	if info := again.Info(); info.State != store.StateRunning {
		t.Errorf("connect answered state %q", info.State)
	}
	checkHeld(t, again, "v-4711", 8001)
	if _, err := os.Stat(filepath.Join(s.cfg.Root, "engine", "paused", sb.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoint outlived the resume: %v", err)
	}

	// A second cycle, and a kill while paused leaves nothing.
	if err := eng.Pause(ctx, sb.ID(), true); err != nil {
		t.Fatal(err)
	}
	if err := eng.Kill(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.cfg.Root, "engine", "paused")); len(entries) != 0 {
		t.Errorf("a killed paused sandbox left its checkpoint: %v", entries)
	}
}

func TestTimeoutPausesAndTrafficResumes(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	eng := s.rt.Engine()
	rec, err := eng.Create(ctx, engine.CreateOptions{Timeout: 3 * time.Second, AutoPause: true, AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.client.Connect(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "echo before > /tmp/mark")
	testutil.WaitFor(t, time.Minute, "the sandbox to pause at its timeout", func() bool {
		got, err := eng.Get(ctx, rec.ID)
		return err == nil && got.State == store.StatePaused
	})
	// A request through the data plane wakes it: the SDK's handle,
	// unchanged, runs a command.
	if res := run(t, sb, "cat /tmp/mark"); res.Stdout != "before\n" {
		t.Errorf("after auto-resume: %q", res.Stdout)
	}
	got, err := eng.Get(ctx, rec.ID)
	if err != nil || got.State != store.StateRunning || !got.EndAt.After(time.Now()) {
		t.Errorf("after auto-resume: %+v, %v; want running with time left", got, err)
	}

	// Without autoResume a paused sandbox stays paused until connect.
	plain, err := eng.Create(ctx, engine.CreateOptions{Timeout: 3 * time.Second, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "the second sandbox to pause at its timeout", func() bool {
		got, err := eng.Get(ctx, plain.ID)
		return err == nil && got.State == store.StatePaused
	})
	if _, err := eng.Dial(ctx, plain.ID, 49983); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("dial of a paused sandbox without autoResume: %v, want failed precondition", err)
	}
}

func TestSnapshotStartsSandboxesAndForkReportsEach(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	eng := s.rt.Engine()
	src := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	holdValue(t, src, "snap-42", 8002)

	sn, err := eng.CreateSnapshot(ctx, src.ID(), "prepared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateSnapshot(ctx, src.ID(), "prepared"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second snapshot of the same name: %v, want already exists", err)
	}
	// The source runs on, and what it does next is not in the snapshot.
	run(t, src, "echo later > /tmp/later")

	var tokens = map[string]bool{src.Info().EnvdAccessToken: true}
	for _, ref := range []string{sn.ID, "prepared"} {
		rec, err := eng.Create(ctx, engine.CreateOptions{Template: ref})
		if err != nil {
			t.Fatalf("create from snapshot %s: %v", ref, err)
		}
		if rec.SnapshotID != sn.ID || tokens[rec.AccessToken] {
			t.Errorf("sandbox from %s: snapshot %q, token reused: %v", ref, rec.SnapshotID, tokens[rec.AccessToken])
		}
		tokens[rec.AccessToken] = true
		sb, err := s.client.Connect(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkHeld(t, sb, "snap-42", 8002)
		if res, err := sb.Commands.Run(ctx, "test -e /tmp/later"); err == nil || res != nil && res.ExitCode == 0 {
			t.Errorf("a sandbox from the snapshot sees a file written after it")
		}
	}

	results, err := eng.Fork(ctx, src.ID(), 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 {
		t.Fatalf("fork of 3: %d results", len(results))
	}
	ids := map[string]bool{}
	for i, r := range results {
		if r.Err != nil {
			t.Errorf("fork %d: %v", i, r.Err)
			continue
		}
		ids[r.Sandbox.ID] = true
		sb, err := s.client.Connect(ctx, r.Sandbox.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res := run(t, sb, "cat /tmp/later"); res.Stdout != "later\n" {
			t.Errorf("fork %d does not see the source's files: %q", i, res.Stdout)
		}
	}
	if len(ids) != 3 || ids[src.ID()] {
		t.Errorf("forks' ids %v: want three new ones", ids)
	}
	// The source runs on after its fork.
	checkHeld(t, src, "snap-42", 8002)

	list, _, err := eng.ListSnapshots(ctx, src.ID(), "", 0, "")
	if err != nil || len(list) != 1 || list[0].ID != sn.ID {
		t.Errorf("snapshots of the source: %+v, %v", list, err)
	}
	if err := eng.DeleteSnapshot(ctx, "prepared"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Create(ctx, engine.CreateOptions{Template: sn.ID}); err == nil {
		t.Error("create from a deleted snapshot succeeded")
	}
}

// TestSnapshotsKeepToTheirKey checks that a key confined to its own
// sandboxes (an MCP session's) neither lists nor starts from another
// key's snapshot, though they share a team: a snapshot holds what its
// sandbox held.
func TestSnapshotsKeepToTheirKey(t *testing.T) {
	s := newStack(t, engine.Config{})
	eng := s.rt.Engine()
	ctx := context.Background()
	a := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "key_a", OnlyKey: true})
	b := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "key_b", OnlyKey: true})
	src, err := eng.Create(a, engine.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := eng.CreateSnapshot(a, src.ID, "a-only")
	if err != nil {
		t.Fatal(err)
	}
	if list, _, err := eng.ListSnapshots(b, "", "", 0, ""); err != nil || len(list) != 0 {
		t.Errorf("key b lists %d snapshots (%v), want none of key a's", len(list), err)
	}
	for _, ref := range []string{sn.ID, "a-only"} {
		if _, err := eng.Create(b, engine.CreateOptions{Template: ref}); err == nil {
			t.Errorf("key b started a sandbox from key a's snapshot %s", ref)
		}
		if err := eng.DeleteSnapshot(b, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("key b deleting key a's snapshot %s: %v, want not found", ref, err)
		}
	}
	if list, _, err := eng.ListSnapshots(a, "", "", 0, ""); err != nil || len(list) != 1 {
		t.Errorf("key a lists %d snapshots (%v), want its own", len(list), err)
	}
	team := engine.WithScope(ctx, engine.Scope{Team: "t1", Key: "key_c"})
	if list, _, err := eng.ListSnapshots(team, "", "", 0, ""); err != nil || len(list) != 1 {
		t.Errorf("a team-wide key lists %d snapshots (%v), want the team's", len(list), err)
	}
}

// TestPauseOfFilesAloneReboots checks E2B's filesystem-only pause
// (keepMemory false): the resume boots the sandbox anew, same id and
// token, with its files and none of its processes; and that a resume that
// asks for a reboot does the same to a sandbox paused with its memory.
func TestPauseOfFilesAloneReboots(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	eng := s.rt.Engine()
	sb := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	check := func(label string, again *sdk.Sandbox) {
		t.Helper()
		if res := run(t, again, "cat /tmp/kept ~/kept"); res.Stdout != "in-tmp\nin-home\n" {
			t.Errorf("%s: files %q", label, res.Stdout)
		}
		if res, err := again.Commands.Run(ctx, "pgrep -f sleep-marker"); err == nil && res.ExitCode == 0 {
			t.Errorf("%s: the process of before the pause still runs: %q", label, res.Stdout)
		}
	}
	run(t, sb, "echo in-tmp > /tmp/kept; echo in-home > ~/kept")
	run(t, sb, "rm /etc/motd", sdk.WithUser("root"))
	if _, err := sb.Commands.Start(ctx, "exec -a sleep-marker sleep 3600", sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	token := sb.Info().EnvdAccessToken

	if err := eng.Pause(ctx, sb.ID(), false); err != nil {
		t.Fatal(err)
	}
	rec, err := eng.Get(ctx, sb.ID())
	if err != nil || rec.State != store.StatePaused || rec.MemoryKept {
		t.Fatalf("after a pause of files alone: %+v, %v", rec, err)
	}
	again, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if again.Info().EnvdAccessToken != token {
		t.Error("the reboot changed the sandbox's access token")
	}
	check("after a pause of files alone", again)
	if res := run(t, again, "test -e /etc/motd && echo there || echo gone"); res.Stdout != "gone\n" {
		t.Errorf("a deletion did not survive the reboot: %q", res.Stdout)
	}

	// Paused with its memory, resumed with a reboot.
	if _, err := again.Commands.Start(ctx, "exec -a sleep-marker sleep 3600", sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	if err := eng.Pause(ctx, sb.ID(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.ResumeWith(ctx, sb.ID(), 0, true); err != nil {
		t.Fatalf("resume with a reboot: %v", err)
	}
	third, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	check("after a reboot of a pause with memory", third)

	// The image the reboots made goes with the sandbox.
	if _, err := s.rt.Images().Resolve(ctx, "tupper-paused/"+sb.ID()); err != nil {
		t.Fatalf("the reboot's image: %v", err)
	}
	if err := eng.Kill(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rt.Images().Resolve(ctx, "tupper-paused/"+sb.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the reboot's image outlived the sandbox: %v", err)
	}
}

// TestSnapshotsPerTeamAreCapped checks that a team keeps no more snapshots
// than the engine allows, each being a sandbox's memory on disk, and that
// deleting one makes room.
func TestSnapshotsPerTeamAreCapped(t *testing.T) {
	s := newStack(t, engine.Config{MaxSnapshotsPerTeam: 2})
	eng := s.rt.Engine()
	ctx := engine.WithScope(context.Background(), engine.Scope{Team: "t1", Key: "k1"})
	other := engine.WithScope(context.Background(), engine.Scope{Team: "t2", Key: "k2"})
	src, err := eng.Create(ctx, engine.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var first *engine.Snapshot
	for i := range 2 {
		sn, err := eng.CreateSnapshot(ctx, src.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sn
		}
	}
	if _, err := eng.CreateSnapshot(ctx, src.ID, ""); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "delete some") {
		t.Errorf("a third snapshot: %v, want refused, saying to delete some", err)
	}
	// Another team's cap is its own.
	osrc, err := eng.Create(other, engine.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateSnapshot(other, osrc.ID, ""); err != nil {
		t.Errorf("another team's first snapshot: %v", err)
	}
	if err := eng.DeleteSnapshot(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateSnapshot(ctx, src.ID, ""); err != nil {
		t.Errorf("a snapshot once one was deleted: %v", err)
	}
}
