package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/sdk"
)

// TestForkAndCheckpointAttacks checks, on real runsc, what a sandbox
// started from another's checkpoint (a fork, or a create from a snapshot)
// shares with it, and what its checkpoints leave on the host's disk:
//   - each agent answers only to its own sandbox's token: the source's
//     token opens no fork, a fork's opens neither the source nor another
//     fork;
//   - code in a fork, as root, finds its source's token nowhere (the
//     environment and command line of every process, the files), and
//     cannot call the agent's /init on its own loopback;
//   - the files of a pause and of a snapshot (the sandbox's memory) are
//     not readable by another user of the host, even when the state
//     directory itself is world-readable.
func TestForkAndCheckpointAttacks(t *testing.T) {
	s := newStack(t, engine.Config{})
	// A state directory an operator made by hand, world-readable: what
	// the engine makes under it must keep its own files to root.
	if err := os.Chmod(s.cfg.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng := s.rt.Engine()
	src := s.create(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
	run(t, src, "echo source > /tmp/mark")
	// What the search below must find, so that it cannot pass by
	// finding nothing: a marker in a file and in a process's command
	// line, kept by the forks. (Other processes' environments are not
	// readable even by root in the sandbox: it lacks CAP_SYS_PTRACE.)
	const marker = "planted-marker-0d1e"
	run(t, src, "echo "+marker+" > /root/planted", sdk.WithUser("root"))
	if _, err := src.Commands.Start(ctx, "sh -c 'sleep 600' "+marker, sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	srcTok := src.Info().EnvdAccessToken

	results, err := eng.Fork(ctx, src.ID(), 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{src.ID(): srcTok}
	var forks []string
	for i, r := range results {
		if r.Err != nil {
			t.Fatalf("fork %d: %v", i, r.Err)
		}
		tokens[r.Sandbox.ID] = r.Sandbox.AccessToken
		forks = append(forks, r.Sandbox.ID)
	}
	sn, err := eng.CreateSnapshot(ctx, src.ID(), "")
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := eng.Create(ctx, engine.CreateOptions{Template: sn.ID})
	if err != nil {
		t.Fatal(err)
	}
	tokens[fromSnap.ID] = fromSnap.AccessToken
	forks = append(forks, fromSnap.ID)

	t.Run("each agent answers to its own token", func(t *testing.T) {
		for id := range tokens {
			for other, tok := range tokens {
				want := http.StatusUnauthorized
				if other == id {
					want = http.StatusOK
				}
				if got := agentStatus(ctx, t, eng, id, tok); got != want {
					t.Errorf("the agent of %s answers %d to %s's token, want %d", id, got, other, want)
				}
			}
		}
	})

	t.Run("a fork finds its source's token nowhere", func(t *testing.T) {
		for _, id := range forks {
			sb, err := s.client.Connect(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if res := run(t, sb, "cat /tmp/mark"); res.Stdout != "source\n" {
				t.Fatalf("%s is not a copy of the source: %q", id, res.Stdout)
			}
			// As root: the environment and command line of every
			// process, and every file outside /proc and /sys. The
			// token is put together from halves, so that the search's
			// own command line does not hold it.
			look := func(s string) string {
				half := len(s) / 2
				script := fmt.Sprintf(`t=%s; t="$t"%s
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f" 2>/dev/null | grep -qF "$t" && echo "$f"; done
grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "$t" / 2>/dev/null
true`, s[:half], s[half:])
				return strings.TrimSpace(run(t, sb, script, sdk.WithUser("root")).Stdout)
			}
			if found := look(marker); !strings.Contains(found, "/cmdline") || !strings.Contains(found, "/root/planted") {
				t.Fatalf("the search finds the planted marker in %s at %q, want a process's command line and /root/planted", id, found)
			}
			if found := look(srcTok); found != "" {
				t.Errorf("the source's token is in %s at:\n%s", id, found)
			}
			for _, body := range []string{"{}", fmt.Sprintf(`{"accessToken":"%s"}`, strings.Repeat("a", 32))} {
				res := run(t, sb, "curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '"+body+"' http://127.0.0.1:49983/init", sdk.WithUser("root"))
				if res.Stdout != "401" {
					t.Errorf("%s's own /init without a token: %s, want 401", id, res.Stdout)
				}
			}
		}
		if got := agentStatus(ctx, t, eng, forks[0], tokens[forks[0]]); got != http.StatusOK {
			t.Errorf("after the tries, the fork's own token gets %d", got)
		}
	})

	t.Run("checkpoint files are root's", func(t *testing.T) {
		if err := eng.Pause(ctx, forks[0], true); err != nil {
			t.Fatal(err)
		}
		var files []string
		filepath.WalkDir(s.cfg.Root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && (strings.Contains(p, "/paused/") || strings.Contains(p, "/snapshots/")) {
				files = append(files, p)
			}
			return nil
		})
		if len(files) == 0 {
			t.Fatalf("no files of the pause or the snapshot under %s", s.cfg.Root)
		}
		for _, f := range files {
			out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "head", "-c", "1", f).CombinedOutput()
			if err == nil {
				t.Errorf("user nobody reads %s (%s)", f, out)
			}
		}
	})
}

// agentStatus calls the agent of sandbox id directly (not through the
// daemon, which checks the token itself) with token, and returns the
// status of a process listing.
func agentStatus(ctx context.Context, t *testing.T, eng *engine.Engine, id, token string) int {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: eng.DialContext, DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+engine.SandboxAddr(id, 49983)+"/process.Process/List", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("call the agent of %s: %v", id, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestRebootImageIsTheTeams checks that the image a reboot makes of a
// sandbox's files (a pause of files alone, then a resume), which the
// store names after the sandbox's id until the sandbox is killed, starts
// no sandbox of another team: it holds what the sandbox wrote.
func TestRebootImageIsTheTeams(t *testing.T) {
	s := newStack(t, engine.Config{})
	eng := s.rt.Engine()
	red := engine.WithScope(context.Background(), engine.Scope{Team: "red", Key: "key_r"})
	blue := engine.WithScope(context.Background(), engine.Scope{Team: "blue", Key: "key_b"})
	rec, err := eng.Create(red, engine.CreateOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.client.Connect(red, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "echo red-secret > ~/secret")
	if err := eng.Pause(red, rec.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Resume(red, rec.ID, 0); err != nil {
		t.Fatal(err)
	}
	name := "tupper-paused/" + rec.ID
	if _, err := s.rt.Images().Resolve(red, name); err != nil {
		t.Fatalf("the reboot's image %s: %v", name, err)
	}
	for _, opts := range []engine.CreateOptions{{Template: name}, {Image: name}} {
		if got, err := eng.Create(blue, opts); !errors.Is(err, errdefs.ErrNotFound) {
			if err == nil {
				eng.Kill(blue, got.ID)
			}
			t.Errorf("another team's create from template %q, image %q: %v, want not found", opts.Template, opts.Image, err)
		}
	}
}
