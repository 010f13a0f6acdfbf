// Package backendtest is the conformance suite every sandbox backend must
// pass. A backend's test calls Run with a way to make the backend, an image
// and the agent binary:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Config{
//			NewBackend: func(t *testing.T) backend.Backend { … },
//			RootFS:     testutil.TestRootFS(t),
//			AgentPath:  testutil.AgentBinary(t),
//		})
//	}
//
// The suite starts sandboxes through Backend.Start as the engine would,
// waits for the agent inside to answer, and drives it through the Go SDK:
// commands, users, signals, terminals, files and watches. Most checks share
// one sandbox to stay fast; the lifecycle checks (State, List, Stop) come
// last.
package backendtest

import (
	"context"
	"crypto/rand"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/sdk"
)

// Config says what to test.
type Config struct {
	// NewBackend makes the backend under test. It is called once; the
	// backend's own cleanup belongs in t.Cleanup.
	NewBackend func(t *testing.T) backend.Backend
	// RootFS is the host path of an unpacked image with bash, coreutils,
	// python3 and the `user` account (uid 1000, home /home/user).
	RootFS string
	// AgentPath is the host path of a static tupper-agent binary.
	AgentPath string
	// Resources are the sandboxes' limits; zero means the backend's
	// defaults, which must leave room for a 100 MiB file.
	Resources backend.Resources
	// ReadyTimeout bounds the wait for a new sandbox's agent to answer;
	// zero means 10 seconds.
	ReadyTimeout time.Duration
	// Crash, when set, ends sandbox id from outside as a crash would
	// (for example by killing its host processes); with it, a backend
	// that is a backend.Waiter is checked to notice.
	Crash func(t *testing.T, id string)
	// NoDiskCap, when set, says why the backend cannot cap a sandbox's
	// disk (its platform has no way to): the disk check is reported as
	// NOT SUPPORTED, by name, with this reason, rather than run. A backend
	// that can cap disk must leave it empty.
	NoDiskCap string
}

func (c *Config) validate(t *testing.T) {
	t.Helper()
	switch {
	case c.NewBackend == nil:
		t.Fatal("backendtest: Config.NewBackend is nil")
	case c.RootFS == "":
		t.Fatal("backendtest: Config.RootFS is empty")
	case c.AgentPath == "":
		t.Fatal("backendtest: Config.AgentPath is empty")
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 10 * time.Second
	}
}

// suite is one run of the conformance checks.
type suite struct {
	cfg Config
	b   backend.Backend
	tr  *transport
	c   *sdk.Client
}

// Run runs the conformance suite against the backend cfg.NewBackend makes.
func Run(t *testing.T, cfg Config) {
	cfg.validate(t)
	s := &suite{cfg: cfg, b: cfg.NewBackend(t)}
	s.tr = newTransport(s.b)
	s.c = &sdk.Client{Transport: s.tr}

	id := s.newID()
	info := s.start(t, id)
	sb, err := s.c.Connect(ctx(t), id)
	if err != nil {
		t.Fatalf("connect the SDK to sandbox %s: %v", id, err)
	}

	diagnose(t, sb)

	t.Run("lifecycle/running", func(t *testing.T) { s.testRunning(t, id, info) })
	t.Run("rootfs", func(t *testing.T) { s.testRootFS(t, sb) })
	t.Run("commands", func(t *testing.T) { s.testCommands(t, sb) })
	t.Run("pty", func(t *testing.T) { testPTY(t, sb) })
	t.Run("files", func(t *testing.T) { testFiles(t, sb) })
	t.Run("isolation", func(t *testing.T) { s.testIsolation(t, sb) })
	t.Run("limits", s.testLimits)
	t.Run("lifecycle/crash", s.testCrash)
	t.Run("lifecycle/stop", func(t *testing.T) { s.testStop(t, id, sb) })
}

// diagnose runs a command as the default user and, when that fails, logs
// what root sees of the sandbox, since every later check would then fail
// the same way.
func diagnose(t *testing.T, sb *sdk.Sandbox) {
	t.Helper()
	_, err := sb.Commands.Run(ctx(t), "true")
	if err == nil {
		return
	}
	t.Errorf("a command as the default user fails: %v", err)
	res, rerr := sb.Commands.Run(ctx(t), "id; id user; ls -ld / /bin /usr/bin/bash /home /home/user /tmp; cat /proc/self/mountinfo",
		sdk.WithUser("root"), sdk.WithCwd("/"))
	if rerr != nil && res == nil {
		t.Logf("as root: %v", rerr)
		return
	}
	t.Logf("what root sees:\n%s%s", res.Stdout, res.Stderr)
}

// newID returns a fresh sandbox id of [a-z0-9].
func (s *suite) newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 12)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "bt" + string(b)
}

func (s *suite) spec(id string) *backend.Spec {
	return &backend.Spec{
		ID:     id,
		RootFS: s.cfg.RootFS,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8",
		},
		Agent: backend.Agent{
			Path: s.cfg.AgentPath,
			Args: []string{"--addr", ":" + strconv.Itoa(backend.AgentPort)},
		},
		Resources: s.cfg.Resources,
		Labels:    map[string]string{"test": "backendtest"},
	}
}

// start boots sandbox id, waits for its agent, and stops it when the test
// ends.
func (s *suite) start(t *testing.T, id string) *backend.Sandbox {
	t.Helper()
	return s.startSpec(t, s.spec(id))
}

// startSpec is start with a spec of the caller's.
func (s *suite) startSpec(t *testing.T, spec *backend.Spec) *backend.Sandbox {
	t.Helper()
	id := spec.ID
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := time.Now()
	info, err := s.b.Start(sctx, spec)
	if err != nil {
		t.Fatalf("Start(%s): %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.b.Stop(ctx, id); err != nil {
			t.Errorf("cleanup: Stop(%s): %v", id, err)
		}
	})
	if info == nil || info.AgentAddr == "" {
		t.Fatalf("Start(%s) returned no agent address: %+v", id, info)
	}
	if info.ID != id {
		t.Errorf("Start(%s) returned a sandbox with id %q", id, info.ID)
	}
	waitHealthy(t, s.tr.client(id, time.Second), s.tr.add(id, info.AgentAddr), s.cfg.ReadyTimeout)
	t.Logf("sandbox %s: agent at %s answered %v after Start", id, info.AgentAddr, time.Since(begin).Round(time.Millisecond))
	return info
}

// waitHealthy polls the agent's GET /health, with client, until it
// answers 204.
func waitHealthy(t *testing.T, client *http.Client, addr string, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	var last string
	for {
		resp, err := client.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent at %s did not answer GET /health with 204 within %v; last answer: %s", addr, bound, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ctx returns a context for one check, bounded so that a hung sandbox
// fails the test instead of stalling it.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs cmd and fails the test unless it exits 0.
func run(t *testing.T, sb *sdk.Sandbox, cmd string, opts ...sdk.CommandOption) *sdk.CommandResult {
	t.Helper()
	res, err := sb.Commands.Run(ctx(t), cmd, opts...)
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return res
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
