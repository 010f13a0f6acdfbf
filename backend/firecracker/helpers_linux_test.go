package firecracker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/internal/testutil"
)

// standIn returns the stand-in firecracker binary
// (internal/fakefirecracker), built once per test binary. It is named
// firecracker, as the jailer wants.
func standIn(t testing.TB) string {
	t.Helper()
	return testutil.StaticBinary(t, "./backend/firecracker/internal/fakefirecracker", "firecracker")
}

// standInJailer returns the stand-in jailer: the stand-in binary under
// the name jailer, which makes it act as one.
func standInJailer(t testing.TB) string {
	t.Helper()
	fc := standIn(t)
	j := filepath.Join(filepath.Dir(fc), "jailer")
	if _, err := os.Stat(j); err != nil {
		if err := os.Link(fc, j); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// needsStandInHost skips unless the host can run the stand-in's guests:
// root, runc, mkfs.ext4 and loop devices.
func needsStandInHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: image disks keep their owners, the stand-in loop-mounts them and runs runc")
	}
	for _, bin := range []string{"mkfs.ext4", "runc", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.Skip(t, bin+" not found (scripts/setup.sh installs it)")
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testutil.Skip(t, "needs loop devices for the stand-in's guest disks")
	}
}

// fakeKernelDir returns a kernel directory for the stand-in, which boots
// no kernel: a vmlinux that is only an ELF header's magic.
func fakeKernelDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, kernelName), []byte("\x7fELF stand-in kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newStandInBackend makes a backend that runs the stand-in without the
// jailer, under a fresh root, and stops what it still holds when the test
// ends.
func newStandInBackend(t testing.TB) *Backend {
	t.Helper()
	needsStandInHost(t)
	b, err := New(Config{
		Root:            t.TempDir(),
		Logger:          testLogger(),
		FirecrackerPath: standIn(t),
		NoJailer:        true,
		KernelDir:       fakeKernelDir(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, b) })
	return b
}

// stopAll stops every sandbox b holds.
func stopAll(t testing.TB, b backend.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids, err := b.List(ctx)
	if err != nil {
		t.Error(err)
	}
	for _, id := range ids {
		if err := b.Stop(ctx, id); err != nil {
			t.Errorf("cleanup: Stop(%s): %v", id, err)
		}
	}
}

// leftovers lists what the host still holds of sandbox id of b: files
// under its root other than the cache, processes, mounts and loop devices
// that name the root or the stand-in's work directories, and cgroups of
// the VMM and of the stand-in's runc sandbox.
func leftovers(t testing.TB, b *Backend, id string) []string {
	t.Helper()
	var found []string
	root := b.cfg.Root
	// Only what is sandbox id's: its directory, its chroot, its uid
	// lease; and in the cache, half-made files.
	leases, _ := b.uids.holders()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		switch {
		case p == b.sandboxDir(id) || p == b.jailDir(id):
			found = append(found, "file "+p)
			return filepath.SkipDir
		case strings.HasPrefix(p, b.cache+"/") && strings.HasSuffix(p, ".tmp"):
			found = append(found, "temporary file "+p)
		case filepath.Dir(p) == b.uids.dir && leases[filepath.Base(p)] == id:
			found = append(found, "uid lease "+p)
		}
		return nil
	})
	// The stand-in's work directories of this sandbox: each names the
	// sandbox that booted its guest in its id file (its runc sandbox's
	// id), and the one whose VMM holds it now in its vmm file (another,
	// once a snapshot was restored into another sandbox).
	ours := []string{b.sandboxDir(id), b.jailDir(id)}
	runcIDs := []string{id}
	if entries, err := os.ReadDir(workBaseForTests); err == nil {
		for _, e := range entries {
			w := filepath.Join(workBaseForTests, e.Name())
			idb, _ := os.ReadFile(filepath.Join(w, "id"))
			vmmb, _ := os.ReadFile(filepath.Join(w, "vmm"))
			if string(idb) == id || string(vmmb) == id {
				found = append(found, "stand-in work directory "+w)
				ours = append(ours, w)
				runcIDs = append(runcIDs, string(idb))
			}
		}
	}
	under := func(s string) bool {
		for _, d := range ours {
			if s == d || strings.HasPrefix(s, d+"/") {
				return true
			}
		}
		return false
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || filepath.Dir(p) == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if arg == id || arg == "--id="+id || under(arg) {
				found = append(found, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
				break
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			f := strings.Fields(line)
			if len(f) <= 4 {
				continue
			}
			if under(f[4]) {
				found = append(found, "mount: "+line)
				continue
			}
			for _, rid := range runcIDs {
				if strings.HasPrefix(f[4], "/run/tupper/runc/") && strings.Contains(f[4]+"/", "/"+rid+"/") {
					found = append(found, "mount: "+line)
					break
				}
			}
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		bf, err := os.ReadFile(l)
		if err == nil && under(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(bf)), "(deleted)"))) {
			found = append(found, "loop device "+filepath.Base(filepath.Dir(filepath.Dir(l)))+": "+strings.TrimSpace(string(bf)))
		}
	}
	// The stand-in guest's network: its runc sandbox's veth.
	links, _ := netlink.LinkList()
	for _, l := range links {
		for _, rid := range runcIDs {
			if a := l.Attrs().Alias; strings.HasPrefix(a, "tupper:"+rid+"@"+workBaseForTests+"/") {
				found = append(found, "interface "+l.Attrs().Name+" ("+a+")")
				break
			}
		}
	}
	rels := []string{cgroupRel(b.cfg.CgroupParent, id)}
	for _, rid := range runcIDs {
		rels = append(rels, "/tupper-runc/"+rid)
	}
	for _, rel := range rels {
		dirs, _ := oci.CgroupDirs(rel)
		for _, d := range dirs {
			found = append(found, "cgroup "+d)
		}
	}
	return found
}

// workBaseForTests is the stand-in's workBase.
const workBaseForTests = "/run/tupper-fakefc"

// noLeftovers fails the test with what is left of sandbox id: called
// once Stop returned, or a Start failed, it must be nothing.
func noLeftovers(t testing.TB, b *Backend, id string) {
	t.Helper()
	if left := leftovers(t, b, id); len(left) > 0 {
		t.Errorf("left behind of sandbox %s:\n  %s", id, strings.Join(left, "\n  "))
	}
}

// startRecorder is the backend under test, noting the id of every sandbox
// started, so that the test can check after the suite that nothing of any
// is left. Everything else, DialSandbox among it, is the backend's.
type startRecorder struct {
	*Backend
	mu  sync.Mutex
	ids []string
}

func (r *startRecorder) Start(ctx context.Context, spec *backend.Spec) (*backend.Sandbox, error) {
	r.mu.Lock()
	r.ids = append(r.ids, spec.ID)
	r.mu.Unlock()
	return r.Backend.Start(ctx, spec)
}
