package local_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// TestDiskAndMemory checks a sandbox's disk with the real agent: /tmp is
// the root's, empty and world-writable at start (the agent removed the
// gVisor backend's placeholder, and runsc mounted no memory tmpfs there);
// files far bigger than the memory limit fit on the disk without the
// out-of-memory killer stepping in, since the disk is not memory; and the
// cap holds for the unprivileged user too.
func TestDiskAndMemory(t *testing.T) {
	s := newStack(t, engine.Config{})
	sb := s.create(t, sdk.CreateOptions{MemoryMB: 256, DiskMB: 1536})
	ctx := context.Background()

	if out := run(t, sb, "ls -A /tmp; stat -c %a /tmp; grep -c ' /tmp ' /proc/mounts || true").Stdout; out != "1777\n0\n" {
		t.Errorf("/tmp at start: %q; want empty, 1777 and no mount of its own", out)
	}
	run(t, sb, "dd if=/dev/zero of=/home/user/big bs=1M count=600 && head -c 600M /dev/urandom > /tmp/big && python3 -c 'b = bytearray(64 << 20)'")
	if out := run(t, sb, "du -cm /home/user/big /tmp/big | tail -1").Stdout; !strings.HasPrefix(out, "1200") {
		t.Errorf("1200 MB of files under a 256 MB memory limit: du says %q", out)
	}
	_, err := sb.Commands.Run(ctx, "dd if=/dev/zero of=/home/user/more bs=1M count=400")
	var exit *sdk.CommandExitError
	if !errors.As(err, &exit) || !strings.Contains(exit.Stderr, "No space left on device") {
		t.Errorf("past the cap, as the user: %v; want ENOSPC", err)
	}
	if out := run(t, sb, "echo alive").Stdout; out != "alive\n" {
		t.Errorf("echo alive = %q", out)
	}
}
