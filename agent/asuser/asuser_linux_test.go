package asuser

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

var (
	root   = &identity.User{Name: "root", Home: "/root"}
	nobody = &identity.User{Name: "nobody", UID: 65534, GID: 65534, Groups: []uint32{65534}, Home: "/nonexistent"}
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: switches a thread to another user")
	}
}

// openDir returns a temporary directory that other users can reach (t.TempDir
// makes its parent private to root).
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "asuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func owner(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Uid, s.Gid
}

func TestDoChecksPermissionsAsTheUser(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777) // past the umask
	tests := []struct {
		name    string
		fn      func() error
		wantErr error
	}{
		{"read a root-only file", func() error { _, err := os.ReadFile(secret); return err }, fs.ErrPermission},
		{"create in root's directory", func() error { return os.WriteFile(filepath.Join(dir, "new"), nil, 0o644) }, fs.ErrPermission},
		{"chmod root's file", func() error { return os.Chmod(secret, 0o666) }, fs.ErrPermission},
		{"remove root's file", func() error { return os.Remove(secret) }, fs.ErrPermission},
		{"create in a shared directory", func() error { return os.WriteFile(filepath.Join(shared, "mine"), nil, 0o644) }, nil},
		{"give its own file to root", func() error { return os.Chown(filepath.Join(shared, "mine"), 0, 0) }, fs.ErrPermission},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Do(nobody, tt.fn)
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("as nobody: err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if uid, gid := owner(t, filepath.Join(shared, "mine")); uid != 65534 || gid != 65534 {
		t.Errorf("a file created as nobody belongs to %d:%d, want 65534:65534", uid, gid)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root only" {
		t.Errorf("root's file after the attempts: %q, %v", b, err)
	}
}

func TestDoSupplementaryGroups(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	p := filepath.Join(dir, "group-readable")
	if err := os.WriteFile(p, []byte("for the group"), 0o640); err != nil {
		t.Fatal(err)
	}
	const gid = 4242
	if err := os.Chown(p, 0, gid); err != nil {
		t.Fatal(err)
	}
	member := *nobody
	member.Groups = []uint32{65534, gid}
	if err := Do(&member, func() error { _, err := os.ReadFile(p); return err }); err != nil {
		t.Errorf("a member of group %d cannot read a file of that group: %v", gid, err)
	}
	if err := Do(nobody, func() error { _, err := os.ReadFile(p); return err }); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("a user outside group %d reads its file: err = %v", gid, err)
	}
}

// TestDoLeavesOtherThreadsAlone checks that the switch stays on the thread
// of Do's caller: everything else in the process is still root, while many
// Do calls run at once.
func TestDoLeavesOtherThreadsAlone(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 200 {
		wg.Go(func() {
			if i%2 == 0 {
				if err := Do(nobody, func() error { _, err := os.ReadFile(secret); return err }); !errors.Is(err, fs.ErrPermission) {
					errs <- errors.New("nobody read root's file")
				}
				return
			}
			if _, err := os.ReadFile(secret); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Once every Do has returned, every thread of the process is root's.
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if (strings.HasPrefix(line, "Uid:") || strings.HasPrefix(line, "Gid:")) && len(strings.Fields(line)) == 5 &&
				strings.Join(strings.Fields(line)[1:], " ") != "0 0 0 0" {
				t.Errorf("%s: %s after every Do returned, want root's", p, line)
			}
		}
	}
}

func TestDoAsTheAgentsOwnUser(t *testing.T) {
	requireRoot(t)
	tid := unix.Gettid()
	var ran int
	if err := Do(root, func() error { ran = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	if ran != tid {
		t.Errorf("Do as root ran on thread %d, want the caller's %d (no switch needed)", ran, tid)
	}
}

// TestDoSwitchesBack checks that Do runs fn on the caller's own thread and
// leaves that thread root again, with root's groups, however fn ends.
func TestDoSwitchesBack(t *testing.T) {
	requireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	groups, err := unix.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	check := func(after string) {
		t.Helper()
		if r, e, s := unix.Getresuid(); r != 0 || e != 0 || s != 0 {
			t.Errorf("after %s: uids %d/%d/%d, want root's", after, r, e, s)
		}
		if r, e, s := unix.Getresgid(); r != 0 || e != 0 || s != 0 {
			t.Errorf("after %s: gids %d/%d/%d, want root's", after, r, e, s)
		}
		if g, _ := unix.Getgroups(); !slices.Equal(g, groups) {
			t.Errorf("after %s: groups %v, want %v", after, g, groups)
		}
		if _, err := os.ReadFile("/proc/self/status"); err != nil {
			t.Errorf("after %s: %v", after, err)
		}
	}
	var inside int
	var uids [3]int
	if err := Do(nobody, func() error {
		inside = unix.Gettid()
		uids[0], uids[1], uids[2] = unix.Getresuid()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside != tid {
		t.Errorf("fn ran on thread %d, want the caller's %d", inside, tid)
	}
	if uids != [3]int{0, 65534, 0} {
		t.Errorf("inside Do: uids %v, want real and saved root's and effective nobody's", uids)
	}
	check("a Do that returned")
	func() {
		defer func() { recover() }()
		Do(nobody, func() error { panic("boom") })
	}()
	check("a Do that panicked")
}

func TestDoNested(t *testing.T) {
	requireRoot(t)
	err := Do(nobody, func() error {
		return Do(nobody, func() error {
			if e := unix.Geteuid(); e != 65534 {
				t.Errorf("nested Do for the same user: euid %d", e)
			}
			return nil
		})
	})
	if err != nil {
		t.Errorf("nested Do for the same user: %v", err)
	}
	other := &identity.User{Name: "other", UID: 4243, GID: 4243}
	err = Do(nobody, func() error { return Do(other, func() error { return nil }) })
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Do for another user inside Do: err = %v, want permission denied", err)
	}
}

func TestDoPanic(t *testing.T) {
	requireRoot(t)
	defer func() {
		if v := recover(); v == nil {
			t.Error("a panic in fn did not reach Do's caller")
		}
	}()
	Do(nobody, func() error { panic("boom") })
}

func TestDoGoexit(t *testing.T) {
	requireRoot(t)
	done := make(chan bool)
	go func() {
		defer func() { done <- true }()
		Do(nobody, func() error { runtime.Goexit(); return nil })
		t.Error("Do returned after fn called runtime.Goexit")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Do hung after fn called runtime.Goexit")
	}
}

// TestUserCannotSignalTheThread checks that a process of the user a thread
// acts for cannot signal that thread (which would stop the agent) or trace
// it: the thread keeps root's real and saved ids.
func TestUserCannotSignalTheThread(t *testing.T) {
	requireRoot(t)
	kill, err := exec.LookPath("kill")
	if err != nil {
		testutil.Skip(t, "no kill command")
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	tids := make(chan int)
	release := make(chan struct{})
	go Do(nobody, func() error {
		tids <- unix.Gettid()
		<-release
		return nil
	})
	tid := strconv.Itoa(<-tids)
	defer close(release)
	for _, args := range [][]string{{"-USR1", tid}} {
		cmd := exec.Command(kill, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("kill %v as nobody, at a thread acting as nobody, succeeded: %s", args, out)
		}
	}
	if _, err := os.ReadFile("/proc/self/task/" + tid + "/environ"); err != nil {
		t.Fatalf("root cannot read the thread's environ: %v", err)
	}
	cat := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/task/"+tid+"/environ")
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cat.Output(); err == nil {
		t.Errorf("nobody reads the environment of a thread acting as nobody: %q", out)
	}
	select {
	case <-sig:
		t.Error("a process of nobody signalled a thread acting as nobody")
	case <-time.After(200 * time.Millisecond):
	}
}
