package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestBusyboxRootFS(t *testing.T) {
	root := BusyboxRootFS(t)
	for _, p := range []string{"bin/busybox", "etc/passwd", "etc/group"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "bin", "sh")); err != nil || target != "/bin/busybox" {
		t.Errorf("bin/sh -> %q, %v; want -> /bin/busybox", target, err)
	}
	if os.Geteuid() != 0 {
		return
	}
	out, err := exec.Command("chroot", root, "/bin/sh", "-c", "echo hello from $(id -un)").CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s /bin/sh: %v\n%s", root, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "hello from root" {
		t.Errorf("output %q, want %q", got, "hello from root")
	}
}

func TestTestRootFS(t *testing.T) {
	if testing.Short() {
		t.Skip("may build the Debian test image (about a minute) on a cold cache")
	}
	root := TestRootFS(t)
	for _, p := range []string{"usr/bin/bash", "usr/bin/python3", "usr/bin/ps", "usr/bin/ls"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("etc/passwd has no user account:\n%s", passwd)
	}
	st, err := os.Stat(filepath.Join(root, "home", "user"))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Sys().(*syscall.Stat_t); s.Uid != 1000 || s.Gid != 1000 {
		t.Errorf("home/user is owned by %d:%d, want 1000:1000", s.Uid, s.Gid)
	}
	// The second call in a binary is free and returns the same tree.
	if again := TestRootFS(t); again != root {
		t.Errorf("second TestRootFS = %q, want %q", again, root)
	}
	out, err := exec.Command("chroot", root, "/usr/bin/python3", "-c", "print(6*7)").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Errorf("python3 in the test image: %v: %s", err, out)
	}
}
