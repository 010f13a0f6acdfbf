package local_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// TestIsolation checks, with the real agent and image, what code inside a
// sandbox must not do to the host, the shared image or other sandboxes, on
// each Linux backend.
func TestIsolation(t *testing.T) {
	for _, name := range []string{"gvisor", "runc"} {
		t.Run(name, func(t *testing.T) { testIsolation(t, name) })
	}
}

func testIsolation(t *testing.T, backendName string) {
	s := newStackOn(t, backendName, engine.Config{}, backend.NetworkConfig{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{})
	neighbour := s.create(t, sdk.CreateOptions{})
	root := sdk.WithUser("root")

	t.Run("host processes are invisible", func(t *testing.T) {
		out := run(t, sb, "ps -e -o comm=", root).Stdout
		for _, comm := range strings.Fields(out) {
			switch comm {
			case "tupper-agent", "ps", "bash":
			default:
				t.Errorf("the sandbox sees a process %q that is not its own (all: %q)", comm, out)
			}
		}
		if strings.Contains(out, filepath.Base(os.Args[0])) {
			t.Errorf("the sandbox sees the test binary: %q", out)
		}
	})

	t.Run("host files are invisible", func(t *testing.T) {
		b := make([]byte, 8)
		rand.Read(b)
		secret := "/etc/tupper-host-secret-" + hex.EncodeToString(b)
		if err := os.WriteFile(secret, []byte("host only"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(secret)
		res, err := sb.Commands.Run(ctx, "cat "+secret+"; ls /root/.cache 2>&1; true", root)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(res.Stdout, "host only") || strings.Contains(res.Stdout, "tupper") {
			t.Errorf("the sandbox reads host files: %q", res.Stdout)
		}
	})

	t.Run("the shared image cannot be changed", func(t *testing.T) {
		run(t, sb, "echo evil > /usr/bin/evil && rm /bin/ls && echo changed >> /etc/hostname", root)
		if got := run(t, sb, "ls /usr/bin/evil; test -e /bin/ls || echo ls-gone", root).Stdout; !strings.Contains(got, "ls-gone") {
			t.Fatalf("the sandbox's own writes did not take: %q", got)
		}
		// The neighbour, from the same image, sees none of it.
		got := run(t, neighbour, "test -e /usr/bin/evil && echo evil; test -e /bin/ls && echo ls-here").Stdout
		if got != "ls-here\n" {
			t.Errorf("another sandbox of the same image sees the changes: %q", got)
		}
		// Nor does the image on the host.
		img, err := s.rt.Images().Resolve(ctx, s.cfg.Engine.DefaultTemplate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(img.RootFS, "usr/bin/evil")); err == nil {
			t.Error("a write inside the sandbox reached the shared image")
		}
		if _, err := os.Lstat(filepath.Join(img.RootFS, "usr/bin/ls")); err != nil {
			t.Errorf("a remove inside the sandbox reached the shared image: %v", err)
		}
	})

	t.Run("pids limit", func(t *testing.T) {
		small, err := s.rt.Engine().Create(ctx, engine.CreateOptions{Template: s.cfg.Engine.DefaultTemplate, Pids: 64})
		if err != nil {
			t.Fatal(err)
		}
		smallSB, err := s.client.Connect(ctx, small.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Try for 200 children that live on; a limit of 64 must stop them.
		// Python's fork fails at once where bash would retry for seconds.
		const forks = `import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print(n)`
		res, err := smallSB.Commands.Run(ctx, "python3 -c '"+forks+"'", sdk.WithTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if err != nil {
			t.Fatalf("fork loop printed %q", res.Stdout)
		}
		if n > 64 || n == 0 {
			t.Errorf("%d children forked under a pids limit of 64", n)
		}
		if got := run(t, neighbour, "echo fine").Stdout; got != "fine\n" {
			t.Errorf("a neighbour of the fork loop answered %q", got)
		}
	})

	t.Run("out of memory", func(t *testing.T) {
		small, err := s.client.Create(ctx, sdk.CreateOptions{MemoryMB: 128})
		if err != nil {
			t.Fatal(err)
		}
		// Touch 384 MiB, three times the limit: the process is killed
		// alone, as a VM's kernel would kill it, and the sandbox lives.
		_, err = small.Commands.Run(ctx, `python3 -c 'b = bytearray(384 << 20); print(len(b))'`, sdk.WithTimeout(time.Minute))
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || exit.ExitCode != 137 {
			t.Fatalf("allocating 3x the memory limit: %v; want the process killed, exit code 137", err)
		}
		if got := run(t, small, "echo alive").Stdout; got != "alive\n" {
			t.Errorf("the sandbox whose process ran out of memory answered %q", got)
		}
		if got := run(t, neighbour, "echo fine").Stdout; got != "fine\n" {
			t.Errorf("a neighbour of the OOM answered %q", got)
		}
	})
}
