package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/testutil"
)

// newJailedBackend makes a backend that runs the stand-in under the
// stand-in jailer, which checks what the real one's chroot and uid would
// deny, and records its command lines in the returned file.
func newJailedBackend(t *testing.T) (*Backend, string) {
	t.Helper()
	needsStandInHost(t)
	record := filepath.Join(t.TempDir(), "jailer.jsonl")
	t.Setenv("TUPPER_FAKEJAILER_RECORD", record)
	b, err := New(Config{
		Root:            t.TempDir(),
		Logger:          testLogger(),
		FirecrackerPath: standIn(t),
		JailerPath:      standInJailer(t),
		KernelDir:       fakeKernelDir(t),
		JailerUIDBase:   990000,
		JailerUIDs:      8,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, b) })
	return b, record
}

// TestJailed runs sandboxes under the jailer: its exact command line, the
// chroot it gets (hard links to the cached files, the writable disk of the
// sandbox's own uid), one uid per sandbox, the vsock and API sockets in
// the chroot, and nothing left after Stop.
func TestJailed(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	b, record := newJailedBackend(t)
	ids := []string{"jail1", "jail2"}
	for _, id := range ids {
		spec := testSpec(t, id)
		spec.Resources.CPUs = 2
		if _, err := b.Start(startCtx(t), spec); err != nil {
			t.Fatalf("Start(%s): %v", id, err)
		}
	}
	var argvs [][]string
	f, err := os.Open(record)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a []string
		json.Unmarshal(sc.Bytes(), &a)
		argvs = append(argvs, a)
	}
	f.Close()
	if len(argvs) != 2 {
		t.Fatalf("the jailer ran %d times: %q", len(argvs), argvs)
	}
	limits := vmmLimits(b.cgroups.Version, 2, 256<<20)
	for i, id := range ids {
		uid := strconv.Itoa(990000 + i)
		want := []string{b.jailer, "--id", id, "--exec-file", b.firecracker, "--uid", uid, "--gid", uid,
			"--chroot-base-dir", b.chrootBase, "--cgroup-version", strconv.Itoa(b.cgroups.Version), "--parent-cgroup", DefaultCgroupParent}
		for _, l := range limits {
			want = append(want, "--cgroup", l.File+"="+l.Value)
		}
		want = append(want, "--", "--api-sock", "/api.sock")
		if d := cmp.Diff(want, argvs[i]); d != "" {
			t.Errorf("%s: jailer argv (-want +got):\n%s", id, d)
		}

		root := chrootRoot(b.chrootBase, b.firecracker, id)
		for name, cached := range map[string]string{kernelName: b.kernel, initramfsName: "initramfs-*.cpio", baseDiskName: "image-*.ext4"} {
			if !filepath.IsAbs(cached) {
				m, _ := filepath.Glob(filepath.Join(b.cache, cached))
				if len(m) != 1 {
					t.Fatalf("cache %s: %v", cached, m)
				}
				cached = m[0]
			}
			var a, c syscall.Stat_t
			if err := syscall.Stat(filepath.Join(root, name), &a); err != nil {
				t.Fatal(err)
			}
			syscall.Stat(cached, &c)
			if a.Ino != c.Ino {
				t.Errorf("%s: %s in the chroot is a copy of %s, not a link", id, name, cached)
			}
		}
		var rw syscall.Stat_t
		syscall.Stat(filepath.Join(root, rwDiskName), &rw)
		if strconv.Itoa(int(rw.Uid)) != uid || rw.Mode&0o600 != 0o600 {
			t.Errorf("%s: the writable disk is %d's, mode %o; want uid %s's", id, rw.Uid, rw.Mode&0o777, uid)
		}
		for _, sock := range []string{b.apiSockPath(id), b.vsockPath(id)} {
			if !strings.HasPrefix(sock, root+"/") {
				t.Errorf("%s: socket %s outside the chroot", id, sock)
			}
			if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
				t.Errorf("%s: socket %s: %v", id, sock, err)
			}
		}
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return b.DialSandbox(ctx, id, backend.AgentPort)
		}}}
		// The agent answers a moment after Start, as the engine expects.
		testutil.WaitFor(t, 10*time.Second, id+"'s agent over the chroot's vsock", func() bool {
			res, err := client.Get("http://sandbox/health")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusNoContent
		})
		if st, err := b.State(t.Context(), id); err != nil || st != backend.StateRunning {
			t.Errorf("%s: State = %q, %v", id, st, err)
		}
	}
	for _, id := range ids {
		if err := b.Stop(t.Context(), id); err != nil {
			t.Fatalf("Stop(%s): %v", id, err)
		}
		noLeftovers(t, b, id)
	}
	if held, _ := b.uids.holders(); len(held) != 0 {
		t.Errorf("uid leases left: %v", held)
	}
}

// TestJailedUndo makes a jailed Start fail after each of its steps.
func TestJailedUndo(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: boots stand-in guests")
	}
	b, _ := newJailedBackend(t)
	steps := []string{"claim", "initramfs", "image disk", "chroot", "writable disk", "cgroup", "spawn", "api socket", "boot", "record"}
	for i, step := range steps {
		t.Run(step, func(t *testing.T) {
			id := fmt.Sprintf("jundo%d", i)
			b.failAt = step
			defer func() { b.failAt = "" }()
			if _, err := b.Start(startCtx(t), testSpec(t, id)); err == nil || !strings.Contains(err.Error(), "injected failure after step "+step) {
				t.Fatalf("Start = %v, want the injected failure", err)
			}
			noLeftovers(t, b, id)
			if held, _ := b.uids.holders(); len(held) != 0 {
				t.Errorf("uid leases left: %v", held)
			}
		})
	}
}

// TestJailerUIDs checks the uid leases: one per sandbox, the range's end
// refused, a lease released is given again.
func TestJailerUIDs(t *testing.T) {
	l := uidLeases{dir: t.TempDir(), base: 990000, count: 2}
	a, err := l.claim("a")
	if err != nil || a != 990000 {
		t.Fatalf("claim a = %d, %v", a, err)
	}
	if b, err := l.claim("b"); err != nil || b != 990001 {
		t.Fatalf("claim b = %d, %v", b, err)
	}
	if _, err := l.claim("c"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a third claim of two: %v", err)
	}
	if err := l.release("a"); err != nil {
		t.Fatal(err)
	}
	if c, err := l.claim("c"); err != nil || c != 990000 {
		t.Errorf("claim after a release = %d, %v", c, err)
	}
	if h, _ := l.holders(); len(h) != 2 || h["0"] != "c" || h["1"] != "b" {
		t.Errorf("holders %v", h)
	}
}
