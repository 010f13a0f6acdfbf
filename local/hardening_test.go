package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
	"golang.org/x/sys/unix"
)

// TestRuncHardening attacks a runc sandbox from inside, as root there, the
// way a container escape starts: each way must be shut, and the sandbox
// and its neighbour must live on.
func TestRuncHardening(t *testing.T) {
	s := newStackOn(t, "runc", engine.Config{}, backend.NetworkConfig{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{})
	neighbour := s.create(t, sdk.CreateOptions{})
	root := sdk.WithUser("root")

	// fails runs cmd as root and wants it to fail; it returns the output.
	fails := func(t *testing.T, what, cmd string) string {
		t.Helper()
		res, err := sb.Commands.Run(ctx, cmd+" 2>&1", root)
		if err == nil {
			t.Errorf("%s succeeded: %q", what, res.Stdout)
		}
		// Refused, not missing: a command the image lacks proves nothing.
		if strings.Contains(res.Stdout, "not found") {
			t.Errorf("%s: %q", what, res.Stdout)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(res.Stdout))
		return res.Stdout
	}

	t.Run("root inside is a stranger outside", func(t *testing.T) {
		maps := map[string]string{}
		for name, box := range map[string]*sdk.Sandbox{"sandbox": sb, "neighbour": neighbour} {
			f := strings.Fields(run(t, box, "cat /proc/self/uid_map", root).Stdout)
			if len(f) != 3 || f[0] != "0" || f[1] == "0" || f[2] != "65536" {
				t.Fatalf("%s uid_map %q: want 0 mapped onto a range of 65536 that is not the host's 0", name, f)
			}
			maps[name] = f[1]
		}
		if maps["sandbox"] == maps["neighbour"] {
			t.Errorf("two sandboxes share the host uid range at %s", maps["sandbox"])
		}
		// A file the sandbox's root makes is not the host's root's.
		run(t, sb, "echo x > /root/mine", root)
		out := run(t, sb, "stat -c %u /root/mine", root).Stdout
		if strings.TrimSpace(out) != "0" {
			t.Errorf("owner inside is %q, want 0", out)
		}
	})

	t.Run("the hardening is in place", func(t *testing.T) {
		status := run(t, sb, "cat /proc/self/status", root).Stdout
		field := func(name string) string {
			for _, line := range strings.Split(status, "\n") {
				if v, ok := strings.CutPrefix(line, name+":"); ok {
					return strings.TrimSpace(v)
				}
			}
			return ""
		}
		if got := field("NoNewPrivs"); got != "1" {
			t.Errorf("NoNewPrivs %q, want 1", got)
		}
		if got := field("Seccomp"); got != "2" {
			t.Errorf("Seccomp %q, want 2 (a filter)", got)
		}
		bnd, err := strconv.ParseUint(field("CapBnd"), 16, 64)
		if err != nil {
			t.Fatalf("CapBnd %q: %v", field("CapBnd"), err)
		}
		for name, bit := range map[string]uint{"CAP_SYS_ADMIN": 21, "CAP_NET_RAW": 13, "CAP_SYS_PTRACE": 19, "CAP_SYS_MODULE": 16, "CAP_NET_ADMIN": 12, "CAP_SYS_RESOURCE": 24, "CAP_DAC_READ_SEARCH": 2} {
			if bnd&(1<<bit) != 0 {
				t.Errorf("the bounding set holds %s", name)
			}
		}
	})

	t.Run("no new namespaces, no mounts", func(t *testing.T) {
		fails(t, "unshare -U", "unshare -U true")
		fails(t, "unshare -r", "unshare -r -m true")
		fails(t, "mount a tmpfs", "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x")
		fails(t, "mount a cgroup (the release_agent escape)", "mkdir -p /mnt/cg && mount -t cgroup -o rdma cgroup /mnt/cg")
		fails(t, "remount /sys writable", "mount -o remount,rw /sys")
	})

	t.Run("dangerous system calls are refused", func(t *testing.T) {
		// Each call with harmless arguments: refused with EPERM by the
		// filter rather than failing on its arguments.
		const probe = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
calls = {"bpf": 321, "keyctl": 250, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "open_by_handle_at": 304, "kexec_load": 246, "init_module": 175}
for name, nr in calls.items():
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, r, os.strerror(ctypes.get_errno()))
`
		if out := run(t, sb, "uname -m", root).Stdout; strings.TrimSpace(out) != "x86_64" {
			t.Skipf("the probe's system call numbers are x86-64's; this is %s", out)
		}
		out := run(t, sb, "python3 -c '"+probe+"'", root).Stdout
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasSuffix(line, "-1 Operation not permitted") {
				t.Errorf("not refused with EPERM: %s", line)
			}
		}
	})

	t.Run("kernel knobs and secrets are out of reach", func(t *testing.T) {
		fails(t, "write core_pattern", "echo '|/tmp/x' > /proc/sys/kernel/core_pattern")
		fails(t, "sysrq", "echo b > /proc/sysrq-trigger")
		fails(t, "write to /sys", "echo 1 > /sys/kernel/mm/transparent_hugepage/enabled")
		if out := run(t, sb, "head -c 16 /proc/kcore | wc -c; cat /proc/keys | wc -l", root).Stdout; strings.Fields(out)[0] != "0" {
			t.Errorf("/proc/kcore is readable: %q", out)
		}
		fails(t, "make /dev/mem", "mknod /tmp/mem c 1 1 && head -c 1 /tmp/mem")
		if out := run(t, sb, "ls /dev", root).Stdout; strings.Contains(out, "kvm") || strings.Contains(out, "sda") || strings.Contains(out, "loop") || strings.Contains(out, "mem\n") {
			t.Errorf("/dev holds host devices: %q", out)
		}
	})

	t.Run("the disk is the sandbox's own", func(t *testing.T) {
		// The sandbox's writes land in its own file system, not the
		// host's: the host sees none of them under the image.
		run(t, sb, "head -c 1M /dev/urandom > /opt/blob", root)
		img, err := s.rt.Images().Resolve(ctx, s.cfg.Engine.DefaultTemplate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(img.RootFS, "opt/blob")); err == nil {
			t.Error("a write inside reached the shared image")
		}
		// The file system inside is not the host's root.
		if out := run(t, sb, "stat -f -c %b /", root).Stdout; strings.TrimSpace(out) == fmt.Sprint(hostBlocks(t)) {
			t.Errorf("the sandbox's / reports the host's file system: %q", out)
		}
	})

	t.Run("killing the agent ends only this sandbox", func(t *testing.T) {
		// PID 1 of a pid namespace ignores signals it has no handler for,
		// even root's SIGKILL from inside.
		sb.Commands.Run(ctx, "kill -9 1", root)
		if got := run(t, sb, "echo alive", root).Stdout; got != "alive\n" {
			t.Errorf("after kill -9 1 the sandbox answered %q", got)
		}
		if got := run(t, neighbour, "echo fine").Stdout; got != "fine\n" {
			t.Errorf("the neighbour answered %q", got)
		}
	})
}

// hostBlocks is the block count of the host's root file system.
func hostBlocks(t *testing.T) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
