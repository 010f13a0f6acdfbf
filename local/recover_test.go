package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend/gvisor"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// TestRecoverWithRunscFailing restarts the runtime while `runsc state`
// fails for every sandbox (as a runsc that is killed, or out of memory,
// or times out would), on real runsc: recovery must keep the sandbox and
// its record, and once runsc answers again the sandbox works with its
// files. A sandbox that is really gone is still recorded killed.
func TestRecoverWithRunscFailing(t *testing.T) {
	s := newStack(t, engine.Config{})
	real, err := gvisor.FindRunsc()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	flag := filepath.Join(dir, "failing")
	wrapper := filepath.Join(dir, "runsc")
	script := "#!/bin/sh\n" +
		"for a in \"$@\"; do [ \"$a\" = state ] && [ -e " + flag + " ] && { echo 'runsc: signal: killed' >&2; exit 137; }; done\n" +
		"exec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s.cfg.BackendOptions = map[string]string{"runsc": wrapper}
	s.rt.Close()
	s.open(t)

	sb := s.create(t, sdk.CreateOptions{})
	run(t, sb, "echo precious > /tmp/work")
	ctx := context.Background()

	// Restart while runsc cannot tell.
	s.rt.Close()
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.open(t)
	if _, err := s.rt.Engine().Get(ctx, sb.ID()); err != nil {
		t.Fatalf("after a restart whose runsc could not tell, the sandbox is gone: %v", err)
	}
	os.Remove(flag)
	again, err := s.client.Connect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, again, "cat /tmp/work").Stdout; got != "precious\n" {
		t.Errorf("the kept sandbox's file reads %q", got)
	}
	if running := s.rt.Engine().Running(); len(running) != 1 || running[0] != sb.ID() {
		t.Errorf("running %v, want %s", running, sb.ID())
	}
	// And one that really died while the runtime was down is recorded
	// killed, not kept.
	s.rt.Close()
	testutil.CrashSandbox(t, sb.ID())
	s.open(t)
	if _, err := s.rt.Engine().Get(ctx, sb.ID()); err == nil || !strings.Contains(err.Error(), "died while the engine was down") {
		t.Errorf("a sandbox that died while the runtime was down: Get = %v, want killed with the reason", err)
	}
}
