package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
)

// Limits as a VM's kernel would hold them (docs/design/limits.md), with
// the real agent and the Debian image: a process past the memory limit is
// killed alone, a fork bomb gets EAGAIN, open files are limited, and the
// sandbox lives on through all of them.

// hostCgroup reads file from sandbox id's host cgroup, whichever
// hierarchy has it ("" when none does).
func hostCgroup(id string, files ...string) string {
	for _, f := range files {
		for _, pattern := range []string{"/sys/fs/cgroup/*/tupper/" + id + "/" + f, "/sys/fs/cgroup/tupper/" + id + "/" + f} {
			m, _ := filepath.Glob(pattern)
			for _, p := range m {
				if b, err := os.ReadFile(p); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
		}
	}
	return ""
}

// hostOOMKills is the host OOM killer's count for sandbox id: it acts
// only when the whole sandbox goes past its host limit.
func hostOOMKills(t *testing.T, id string) int {
	t.Helper()
	for _, line := range strings.Split(hostCgroup(id, "memory.oom_control", "memory.events"), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no oom_kill count in the host memory cgroup of %s", id)
	return 0
}

// bomb allocates 256 MiB at a time and keeps it, the loop that used to
// end whole sandboxes.
const bomb = `python3 -c '
import sys
bufs = []
while True:
    bufs.append(bytearray(256 << 20))
    print(len(bufs) * 256, "MiB", flush=True)
'`

func TestMemoryBombKillsOnlyItsProcess(t *testing.T) {
	s := newStack(t, engine.Config{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{MemoryMB: 512})

	run(t, sb, "echo precious > /tmp/keep")
	sibling, err := sb.Commands.Start(ctx, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	defer sibling.Kill(ctx)

	t.Run("a bomb run as the command", func(t *testing.T) {
		begin := time.Now()
		res, err := sb.Commands.Run(ctx, bomb)
		t.Logf("killed after %v: %v", time.Since(begin).Round(time.Millisecond), err)
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) {
			t.Fatalf("bomb: %v, want a CommandExitError", err)
		}
		if res.ExitCode != 137 || !strings.Contains(res.Error, "out of memory") {
			t.Errorf("bomb ended with exit %d, error %q; want 137 and out of memory", res.ExitCode, res.Error)
		}
		if !strings.Contains(res.Stdout, "256 MiB") {
			t.Errorf("the bomb never allocated: %q", res.Stdout)
		}
	})

	t.Run("a bomb inside a script", func(t *testing.T) {
		// Only the bomb dies; the shell that ran it goes on, as under
		// Linux's OOM killer.
		got := run(t, sb, bomb+" >/dev/null; echo survived $?").Stdout
		if got != "survived 137\n" {
			t.Errorf("script = %q, want survived 137", got)
		}
	})

	t.Run("the sandbox lives on", func(t *testing.T) {
		if got := run(t, sb, "echo alive").Stdout; got != "alive\n" {
			t.Errorf("echo alive = %q", got)
		}
		if got := run(t, sb, "cat /tmp/keep").Stdout; got != "precious\n" {
			t.Errorf("/tmp/keep = %q", got)
		}
		if got := run(t, sb, fmt.Sprintf("kill -0 %d && echo running", sibling.PID())).Stdout; got != "running\n" {
			t.Errorf("the sibling sleep: %q", got)
		}
		// The host's OOM killer, which would have ended the whole
		// sandbox, never had to act.
		if n := hostOOMKills(t, sb.ID()); n != 0 {
			t.Errorf("the host OOM killer acted %d times", n)
		}
	})
}

func TestForkBombAndSpinner(t *testing.T) {
	const pids = 128
	s := newStack(t, engine.Config{DefaultPids: pids})
	ctx := context.Background()
	root := sdk.WithUser("root")
	bombed := s.create(t, sdk.CreateOptions{})
	spinning := s.create(t, sdk.CreateOptions{CPUs: 2})
	neighbour := s.create(t, sdk.CreateOptions{})

	// The limits inside: all users together, and each user 16 short of
	// that (an eighth of 128), so that root can end a runaway user.
	if got := run(t, bombed, "cat /sys/fs/cgroup/pids/pids.max; ulimit -u").Stdout; got != "128\n112\n" {
		t.Errorf("sandbox and per-user task limits = %q, want 128 and 112", got)
	}

	// One sandbox spins on every core; another runs the classic bomb, as
	// the default user.
	spin, err := spinning.Commands.Start(ctx, `for i in $(seq $(nproc)); do (while :; do :; done) & done; wait`)
	if err != nil {
		t.Fatal(err)
	}
	defer spin.Kill(ctx)
	// The shell that starts it stays, so that the bomb's process group,
	// which every bomb process is in, has a handle to kill it by.
	bomb, err := bombed.Commands.Start(ctx, `bomb() { bomb | bomb & }; bomb; sleep 600`)
	if err != nil {
		t.Fatal(err)
	}
	defer bomb.Kill(ctx)

	// The neighbour answers all along, until the bomb is at its limit
	// (EAGAIN) and a while after.
	const eagain = "Resource temporarily unavailable"
	deadline := time.Now().Add(2 * time.Minute)
	for i, after := 0, 0; after < 3; i++ {
		begin := time.Now()
		if got := run(t, neighbour, "echo hi").Stdout; got != "hi\n" {
			t.Fatalf("neighbour: %q", got)
		}
		t.Logf("neighbour round trip under the bomb and the spinner: %v", time.Since(begin).Round(time.Millisecond))
		if strings.Contains(bomb.Stderr(), eagain) {
			after++
		} else if time.Now().After(deadline) {
			t.Fatalf("the bomb saw no EAGAIN in 2 minutes: %q", tail(bomb.Stderr(), 300))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The bomb is held at its user's limit, under the sandbox's. Killing
	// its process group frees the sandbox, which answers; root ends any
	// bomb process forked while the group was being killed.
	if err := bomb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(45 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := bombed.Commands.Run(rctx, "echo alive")
		cancel()
		if err == nil && res.Stdout == "alive\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bombed sandbox does not answer 45s after the bomb was killed: %v", err)
		}
		rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		bombed.Commands.Run(rctx, "pkill -9 -u user", root)
		cancel()
	}
	// The host tasks behind the bomb stayed under the sandbox's host
	// limit, which the sandbox's own limit kept it from reaching.
	peak, _ := strconv.Atoi(hostCgroup(bombed.ID(), "pids.peak", "pids.current"))
	hostMax, _ := strconv.Atoi(hostCgroup(bombed.ID(), "pids.max"))
	t.Logf("host tasks of the bombed sandbox: peak %d, limit %d (sandbox limit %d)", peak, hostMax, pids)
	if peak == 0 || peak > hostMax {
		t.Errorf("host tasks peaked at %d, limit %d", peak, hostMax)
	}
	if ev := hostCgroup(bombed.ID(), "pids.events"); ev != "max 0" {
		t.Errorf("host pids.events = %q: the host's limit, not the sandbox's, stopped the bomb", ev)
	}
}

func TestOpenFilesLimit(t *testing.T) {
	s := newStack(t, engine.Config{})
	sb := s.create(t, sdk.CreateOptions{})
	const open = `python3 -c '
import sys
fs = []
try:
    for i in range(int(sys.argv[1])):
        fs.append(open("/dev/null"))
    print("opened", len(fs))
except OSError as e:
    print("failed after", len(fs), e.strerror)
' `
	tests := []struct {
		name, cmd, want string
	}{
		{"soft", "ulimit -n", "1024\n"},
		{"hard", "ulimit -Hn", "65536\n"},
		// Three descriptors are the standard ones.
		{"enforced", open + "1100", "failed after 1021 Too many open files\n"},
		{"raised to the hard limit", "ulimit -n 65536 && " + open + "5000", "opened 5000\n"},
		{"not past the hard limit", "ulimit -n 65537 2>/dev/null || echo refused", "refused\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(t, sb, tt.cmd).Stdout; got != tt.want {
				t.Errorf("%s = %q, want %q", tt.cmd, got, tt.want)
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
