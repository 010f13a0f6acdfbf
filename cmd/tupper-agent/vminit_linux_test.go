package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/proto/process/processconnect"
)

func TestExt4Label(t *testing.T) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs)")
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-L", vmRWLabel, disk, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if got := ext4Label(disk); got != vmRWLabel {
		t.Errorf("ext4Label = %q, want %q", got, vmRWLabel)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, make([]byte, 4096), 0o600)
	if got := ext4Label(plain); got != "" {
		t.Errorf("ext4Label of zeros = %q, want none", got)
	}
	if got := ext4Label(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("ext4Label of a missing file = %q", got)
	}
}

func TestReadBootConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"hostname":"sb1","env":["A=1","TUPPER_ACCESS_TOKEN=t"],"args":["--addr",":49983"],"pids":128}`), 0o600)
	c, err := readBootConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	want := &vmBootConfiguration{Hostname: "sb1", Env: []string{"A=1", "TUPPER_ACCESS_TOKEN=t"}, Args: []string{"--addr", ":49983"}, Pids: 128}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("boot configuration (-want +got):\n%s", d)
	}
	for name, body := range map[string]string{"bad env": `{"env":["NOEQUALS"]}`, "not json": `{`} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := readBootConfig(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := readBootConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing boot configuration: no error")
	}
}

func TestLoadModulesWithoutOrder(t *testing.T) {
	if err := loadModules(filepath.Join(t.TempDir(), "order")); err != nil {
		t.Errorf("a kernel without modules to load: %v", err)
	}
}

// TestVMInit boots the agent as a microVM's init would be booted, without
// a microVM (this machine's KVM cannot run a stock guest kernel): the two
// disks are loop devices made from the test image, and the agent runs as
// /init and PID 1 of new PID, mount, UTS and IPC namespaces, chrooted into
// a tmpfs as the kernel leaves it in its initramfs. It must find the disks
// by label, make the overlay root, read and remove the boot
// configuration, and serve as the agent from /.tupper/tupper-agent; then
// commands run in the image with its users, the host name and variables
// of the boot configuration, the writable disk's cap, a read-only agent.
func TestVMInit(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: loop devices, mounts and namespaces")
	}
	for _, bin := range []string{"mkfs.ext4", "debugfs", "losetup", "unshare", "chroot"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, bin+" not found")
		}
	}
	if testing.Short() {
		t.Skip("short mode: makes a disk of the test image")
	}
	image := testutil.TestRootFS(t)
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}

	// The disks, as backend/firecracker makes them.
	base := filepath.Join(dir, "base.ext4")
	run("mkfs.ext4", "-q", "-F", "-L", vmBaseLabel, "-O", "^has_journal", "-d", image, base, "2G")
	staging := filepath.Join(dir, "staging")
	for _, d := range []string{"upper", "work"} {
		os.MkdirAll(filepath.Join(staging, d), 0o755)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	boot := vmBootConfiguration{
		Hostname: "vm-init-test",
		Env:      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "FROM_BOOT=yes", "TUPPER_ACCESS_TOKEN=secret"},
		// The host's network: the test reaches the agent on loopback.
		Args: []string{"--addr", addr},
		Pids: 256,
	}
	b, _ := json.Marshal(boot)
	os.WriteFile(filepath.Join(staging, vmBootConfig), b, 0o600)
	rw := filepath.Join(dir, "rw.ext4")
	run("mkfs.ext4", "-q", "-F", "-L", vmRWLabel, "-m", "0", "-d", staging, rw, "64M")

	var devs []string
	for _, d := range []struct{ file, mode string }{{base, "--read-only"}, {rw, ""}} {
		args := []string{"--find", "--show"}
		if d.mode != "" {
			args = append(args, d.mode)
		}
		dev := run("losetup", append(args, d.file)...)
		t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
		devs = append(devs, filepath.Base(dev))
	}

	// The initramfs: a tmpfs with the agent as /init, nothing else.
	initrd := filepath.Join(dir, "initrd")
	os.Mkdir(initrd, 0o755)
	// The static agent: the initramfs has no libraries.
	exe := testutil.AgentBinary(t)
	script := `set -e
mount -t tmpfs -o mode=0755 initramfs "$1"
cp "$2" "$1/init"
exec chroot "$1" /init`
	// A cgroup namespace too: the init's cgroup2 mount must show the
	// test's cgroup as its root, never the host's (where it would make
	// its "sandbox" cgroup; here it cannot, and says so).
	cmd := exec.Command("unshare", "--pid", "--mount", "--uts", "--ipc", "--cgroup", "--fork", "--kill-child", "--propagation", "private",
		"sh", "-c", script, "sh", initrd, exe)
	// Only the test's disks: the host has others, some with the same
	// labels (other tests' stand-in guests).
	cmd.Env = []string{vmDisksEnv + "=" + strings.Join(devs, ",")}
	var console strings.Builder
	cmd.Stdout, cmd.Stderr = &console, &console
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("console:\n%s", console.String())
		}
	})

	a := &agentProc{cmd: cmd, url: "http://" + addr}
	a.client = processconnect.NewProcessClient(&http.Client{Transport: tokenTransport{"secret"}}, a.url, connect.WithProtoJSON())
	testutil.WaitFor(t, 30*time.Second, "the agent booted as init to answer", func() bool {
		select {
		case <-exited:
			t.Fatalf("init exited:\n%s", console.String())
		default:
		}
		res, err := http.Get(a.url + "/health")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNoContent
	})

	imageRoot, err := os.Stat(image)
	if err != nil {
		t.Fatal(err)
	}
	root := &agentProc{url: a.url, client: processconnect.NewProcessClient(&http.Client{Transport: rootTransport{tokenTransport{"secret"}}}, a.url, connect.WithProtoJSON())}
	checks := []struct {
		name, script, want string
		asRoot             bool
		code               int32
	}{
		{name: "the agent is PID 1, from /.tupper", script: "tr '\\0' ' ' </proc/1/cmdline | cut -d' ' -f1-3", want: "/.tupper/tupper-agent --addr " + addr + "\n"},
		{name: "the root is the overlay", script: "awk '$2 == \"/\" {print $3}' /proc/mounts", want: "overlay\n"},
		{name: "the root has the image's mode", script: "stat -c %a /", want: fmt.Sprintf("%o\n", imageRoot.Mode().Perm())},
		{name: "the image's users", script: "id -u user", want: "1000\n"},
		{name: "the boot configuration's host name", script: "hostname", want: "vm-init-test\n"},
		{name: "its variables, without the token", script: "echo $FROM_BOOT; env | grep -c TUPPER_ || true", want: "yes\n0\n"},
		{name: "the disks and the boot configuration are out of reach", script: "ls /tupper-boot.json /upper 2>&1 | grep -c 'No such file'; ls -A /mnt | wc -l", want: "2\n0\n", asRoot: true},
		{name: "the agent is read-only", script: "touch /.tupper/x 2>/dev/null && echo wrote; cp /bin/true /.tupper/tupper-agent 2>/dev/null && echo replaced; echo done", want: "done\n", asRoot: true},
		{name: "proc, sys, dev, devpts, shm", script: "awk '{print $2, $3}' /proc/mounts | grep -E '^/(proc|sys|dev|dev/pts|dev/shm) ' | sort", want: "/dev devtmpfs\n/dev/pts devpts\n/dev/shm tmpfs\n/proc proc\n/sys sysfs\n"},
		{name: "writes land on the writable disk", script: "echo kept > /etc/written && cat /etc/written", want: "kept\n", asRoot: true},
		{name: "the disk's cap holds", script: "head -c 100M /dev/zero > /tmp/fill", code: 1},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			p := a
			if c.asRoot {
				p = root
			}
			out, code := p.run(t, c.script)
			if code != c.code || out != c.want {
				t.Errorf("%q: %q, exit %d; want %q, exit %d", c.script, out, code, c.want, c.code)
			}
		})
	}

	// The machine ends; its writable disk kept the sandbox's writes
	// without the boot configuration.
	cmd.Process.Kill()
	<-exited
	ls := run("debugfs", "-R", "ls -p /", rw)
	if strings.Contains(ls, vmBootConfig) {
		t.Errorf("the boot configuration is still on the writable disk:\n%s", ls)
	}
	if got := run("debugfs", "-R", "cat /upper/etc/written", rw); !strings.Contains(got, "kept") {
		t.Errorf("upper/etc/written on the writable disk: %q", got)
	}
}

// rootTransport makes requests act as root.
type rootTransport struct{ next http.RoundTripper }

func (rt rootTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth("root", "")
	return rt.next.RoundTrip(r)
}
