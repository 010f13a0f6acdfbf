package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/internal/testutil"
)

// crashStartEnv, set in this test binary's environment, makes it stand in
// for a daemon that is killed mid-Start: it runs one Start of the
// crashStart the variable holds (JSON), which the test kills.
const crashStartEnv = "TUPPER_GVISOR_TEST_CRASH_START"

type crashStart struct {
	Root, RootFS, Agent, ID string
}

// runCrashStart is the body of the stand-in daemon.
func runCrashStart(v string) int {
	var cs crashStart
	if err := json.Unmarshal([]byte(v), &cs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	b, err := New(Config{Root: cs.Root, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = b.Start(context.Background(), &backend.Spec{
		ID: cs.ID, RootFS: cs.RootFS, Agent: backend.Agent{Path: cs.Agent}, Env: []string{"PATH=/bin"},
	})
	fmt.Fprintln(os.Stderr, "the start was not killed in time:", err)
	return 1
}

// TestStopAfterKillDuringRunscCreate kills a process in the middle of its
// Start's `runsc create`, which goes on without it, and stops the sandbox
// from a new Backend on the same Root at once, as a restarted daemon
// does. Nothing of the sandbox may be left once the orphaned runsc is
// done: Stop must not clean up under its feet.
func TestStopAfterKillDuringRunscCreate(t *testing.T) {
	requireSandboxes(t)
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			root := t.TempDir()
			id := newID("orphan")
			// Whatever happens, what the stand-in made goes at the end.
			b := newTestBackend(t, func(c *Config) { c.Root = root })
			cs, _ := json.Marshal(crashStart{Root: root, RootFS: testRootFS, Agent: testAgent, ID: id})
			daemon := exec.Command(os.Args[0], "-test.run=^$")
			daemon.Env = append(os.Environ(), crashStartEnv+"="+string(cs))
			var out bytes.Buffer
			daemon.Stdout, daemon.Stderr = &out, &out
			if err := daemon.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { daemon.Wait(); close(exited) }()
			// Only the stand-in's own processes are watched, and often:
			// runsc create lasts a few hundred milliseconds, and a scan
			// of a busy host's /proc can take longer.
			deadline := time.Now().Add(time.Minute)
		watch:
			for {
				for _, pid := range testutil.Descendants(daemon.Process.Pid) {
					if args := testutil.CommandLine(pid); len(args) > 0 && filepath.Base(args[0]) == "runsc" && slices.Contains(args, "create") {
						break watch
					}
				}
				select {
				case <-exited:
					t.Fatalf("the stand-in daemon ended before runsc create was seen:\n%s", out.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("no runsc create within a minute:\n%s", out.String())
				}
				time.Sleep(2 * time.Millisecond)
			}
			daemon.Process.Kill()
			<-exited

			if err := b.Stop(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			// Whatever the orphan does, it does it within runsc's bound.
			testutil.WaitFor(t, runscTimeout, "the orphaned runsc to end", func() bool {
				return len(runscCommands(b.Cmd.Command, b.Cmd.Root)[id]) == 0
			})
			assertNothingLeft(t, b, id)
		})
	}
}
