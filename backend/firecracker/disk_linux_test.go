package firecracker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/internal/testutil"
)

// needsE2fsprogs skips unless mkfs.ext4, e2fsck and debugfs are here and
// the test runs as root (mkfs.ext4 -d keeps owners only then).
func needsE2fsprogs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Skip(t, "needs root: the disk must keep the tree's owners")
	}
	var mkfs string
	for _, bin := range []string{"mkfs.ext4", "e2fsck", "debugfs", "dumpe2fs"} {
		p, err := exec.LookPath(bin)
		if err != nil {
			testutil.Skip(t, bin+" not found: install e2fsprogs")
		}
		if bin == "mkfs.ext4" {
			mkfs = p
		}
	}
	return mkfs
}

// e2fsck checks the file system in disk read-only and fails the test on
// any problem.
func e2fsck(t *testing.T, disk string) {
	t.Helper()
	out, err := exec.Command("e2fsck", "-fn", disk).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", disk, err, out)
	}
}

// superblock returns dumpe2fs -h's fields.
func superblock(t *testing.T, disk string) map[string]string {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", disk).Output()
	if err != nil {
		t.Fatalf("dumpe2fs %s: %v", disk, err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return fields
}

// diskEntry is what debugfs's "ls -p" says of a directory entry.
type diskEntry struct {
	Inode    int
	Mode     uint32 // type and permission bits, as st_mode
	UID, GID int
	Size     int64 // regular files and symlinks only
}

// listDisk lists every directory of dirs in disk with one debugfs run,
// keyed by path ("/etc/passwd").
func listDisk(t *testing.T, disk string, dirs []string) map[string]diskEntry {
	t.Helper()
	var cmds bytes.Buffer
	for _, d := range dirs {
		fmt.Fprintf(&cmds, "ls -p %q\n", d)
	}
	cmd := exec.Command("debugfs", "-f", "-", disk)
	cmd.Stdin = &cmds
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("debugfs: %v", err)
	}
	entries := map[string]diskEntry{}
	i := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	dir := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "debugfs: ") {
			dir = dirs[i]
			i++
			continue
		}
		// /inode/mode/uid/gid/name/size/ — a name may hold '/'? No: but
		// it may hold anything else, so split from both ends.
		if !strings.HasPrefix(line, "/") || !strings.HasSuffix(line, "/") {
			continue
		}
		f := strings.Split(line[1:len(line)-1], "/")
		if len(f) < 6 {
			t.Fatalf("debugfs line %q", line)
		}
		name := strings.Join(f[4:len(f)-1], "/")
		if name == "." || name == ".." {
			continue
		}
		ino, _ := strconv.Atoi(f[0])
		mode, _ := strconv.ParseUint(f[1], 8, 32)
		uid, _ := strconv.Atoi(f[2])
		gid, _ := strconv.Atoi(f[3])
		size, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		entries[filepath.Join(dir, name)] = diskEntry{Inode: ino, Mode: uint32(mode), UID: uid, GID: gid, Size: size}
	}
	return entries
}

// compareTree checks that every file under root is in disk with its type,
// permissions (set-id and sticky bits included), owners and size, and
// that the disk holds nothing else but lost+found. It returns the disk's
// entries.
func compareTree(t *testing.T, root, disk string) map[string]diskEntry {
	t.Helper()
	want := map[string]diskEntry{}
	dirs := []string{"/"}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel := "/" + strings.TrimPrefix(p, root+"/")
		st := fi.Sys().(*syscall.Stat_t)
		e := diskEntry{Mode: st.Mode, UID: int(st.Uid), GID: int(st.Gid)}
		if fi.Mode().IsRegular() || fi.Mode()&os.ModeSymlink != 0 {
			e.Size = fi.Size()
		}
		want[rel] = e
		if fi.IsDir() {
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := listDisk(t, disk, dirs)
	ignoreInode := map[string]diskEntry{}
	for p, e := range got {
		if p == "/lost+found" {
			continue
		}
		e.Inode = 0
		ignoreInode[p] = e
	}
	if d := cmp.Diff(want, ignoreInode); d != "" {
		t.Errorf("the disk's files differ from the tree's (-tree +disk):\n%s", d)
	}
	return got
}

// testTree makes a tree with what an image may hold: owners, set-id and
// sticky bits, symlinks short and long, hard links, a FIFO, a device node,
// an extended attribute, empty, sparse and odd-sized files.
func testTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc", "usr/bin", "home/user", "tmp", "srv/shared", "dev", "deep/a/b/c/d/e"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.Chmod(root, 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "usr/bin/su"), []byte("setuid"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/su"), 0o4755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/wall"), []byte("setgid"), 0o755))
	must(os.Chown(filepath.Join(root, "usr/bin/wall"), 0, 5))
	must(os.Chmod(filepath.Join(root, "usr/bin/wall"), 0o2755))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o1777))
	must(os.Chown(filepath.Join(root, "srv/shared"), 0, 50))
	must(os.Chmod(filepath.Join(root, "srv/shared"), 0o2775))
	must(os.Chown(filepath.Join(root, "home/user"), 1000, 1000))
	must(os.Chmod(filepath.Join(root, "home/user"), 0o750))
	must(os.WriteFile(filepath.Join(root, "home/user/notes"), []byte("mine"), 0o640))
	must(os.Lchown(filepath.Join(root, "home/user/notes"), 1000, 1000))
	must(os.WriteFile(filepath.Join(root, "home/user/empty"), nil, 0o600))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Symlink("/"+strings.Repeat("long/", 30)+"target", filepath.Join(root, "longlink")))
	must(os.Symlink("notes", filepath.Join(root, "home/user/link")))
	must(os.Lchown(filepath.Join(root, "home/user/link"), 1000, 1000))
	must(os.Link(filepath.Join(root, "etc/passwd"), filepath.Join(root, "etc/passwd.hard")))
	must(unix.Mkfifo(filepath.Join(root, "tmp/fifo"), 0o600))
	must(unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Setxattr(filepath.Join(root, "usr/bin/su"), "user.tupper", []byte("kept"), 0))
	odd := bytes.Repeat([]byte("0123456789abcdef"), 4097)
	must(os.WriteFile(filepath.Join(root, "deep/a/b/c/d/e/odd"), odd[:len(odd)-3], 0o644))
	sparse, err := os.Create(filepath.Join(root, "srv/sparse"))
	must(err)
	must(sparse.Truncate(64 << 20))
	_, err = sparse.WriteAt([]byte("end"), 64<<20-3)
	must(err)
	sparse.Close()
	return root
}

func TestMakeBaseDisk(t *testing.T) {
	mkfs := needsE2fsprogs(t)
	root := testTree(t)
	disk := filepath.Join(t.TempDir(), "image.ext4")
	if err := makeBaseDisk(t.Context(), mkfs, root, disk); err != nil {
		t.Fatal(err)
	}
	e2fsck(t, disk)
	sb := superblock(t, disk)
	if sb["Filesystem volume name"] != baseLabel {
		t.Errorf("label %q, want %q", sb["Filesystem volume name"], baseLabel)
	}
	if strings.Contains(sb["Filesystem features"], "has_journal") {
		t.Errorf("the image disk has a journal: %s", sb["Filesystem features"])
	}
	if sb["Reserved block count"] != "0" {
		t.Errorf("reserved blocks %s, want 0", sb["Reserved block count"])
	}
	got := compareTree(t, root, disk)
	if a, b := got["/etc/passwd"], got["/etc/passwd.hard"]; a.Inode == 0 || a.Inode != b.Inode {
		t.Errorf("the hard link is a copy: inodes %d and %d", a.Inode, b.Inode)
	}
	// Contents, symlink targets and the extended attribute, read back.
	out, err := exec.Command("debugfs", "-R", "ea_get /usr/bin/su user.tupper", disk).Output()
	if err != nil || !strings.Contains(string(out), "kept") {
		t.Errorf("xattr user.tupper: %q, %v", out, err)
	}
	back := filepath.Join(t.TempDir(), "back")
	os.Mkdir(back, 0o755)
	if out, err := exec.Command("debugfs", "-R", "rdump / "+back, disk).CombinedOutput(); err != nil {
		t.Fatalf("rdump: %v\n%s", err, out)
	}
	for _, p := range []string{"etc/passwd", "home/user/notes", "deep/a/b/c/d/e/odd", "usr/bin/su"} {
		a, _ := os.ReadFile(filepath.Join(root, p))
		b, err := os.ReadFile(filepath.Join(back, p))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: content differs (%v)", p, err)
		}
	}
	for _, p := range []string{"bin", "longlink", "home/user/link"} {
		a, _ := os.Readlink(filepath.Join(root, p))
		b, err := os.Readlink(filepath.Join(back, p))
		if err != nil || a != b {
			t.Errorf("symlink %s: %q on disk, %q in the tree (%v)", p, b, a, err)
		}
	}
	if a, err := os.ReadFile(filepath.Join(back, "srv/sparse")); err != nil || len(a) != 64<<20 || string(a[len(a)-3:]) != "end" {
		t.Errorf("the sparse file: %d bytes, %v", len(a), err)
	}
}

// TestMakeBaseDiskTestImage makes the disk of the conformance suite's
// Debian image and checks every file's metadata on it.
func TestMakeBaseDiskTestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the test image is a few hundred MiB")
	}
	mkfs := needsE2fsprogs(t)
	root := testutil.TestRootFS(t)
	disk := filepath.Join(t.TempDir(), "image.ext4")
	if err := makeBaseDisk(t.Context(), mkfs, root, disk); err != nil {
		t.Fatal(err)
	}
	e2fsck(t, disk)
	got := compareTree(t, root, disk)
	if e := got["/usr/bin/passwd"]; e.Mode&unix.S_ISUID == 0 {
		t.Errorf("/usr/bin/passwd lost its setuid bit: mode %o", e.Mode)
	}
	if e := got["/home/user"]; e.UID != 1000 {
		t.Errorf("/home/user owned by %d", e.UID)
	}
}

// TestMakeBaseDiskTooSmall checks that a file system too small for its
// tree is told apart from other mkfs failures, which is what makes
// makeBaseDisk grow its estimate.
func TestMakeBaseDiskTooSmall(t *testing.T) {
	mkfs := needsE2fsprogs(t)
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "big"), bytes.Repeat([]byte{1}, 8<<20), 0o644)
	err := runMkfs(t.Context(), mkfs, filepath.Join(t.TempDir(), "d.ext4"), 4<<20, "-d", root)
	if !errors.Is(err, errNoSpace) {
		t.Errorf("err = %v, want errNoSpace", err)
	}
	err = runMkfs(t.Context(), mkfs, filepath.Join(t.TempDir(), "d.ext4"), 16<<20, "-O", "no_such_feature")
	if err == nil || errors.Is(err, errNoSpace) {
		t.Errorf("an unknown feature: err = %v, want another failure", err)
	}
}

func TestMakeRWDisk(t *testing.T) {
	mkfs := needsE2fsprogs(t)
	dir := t.TempDir()
	disk := filepath.Join(dir, "rw.ext4")
	boot := &bootConfig{Hostname: "sb1", Env: []string{"A=1", "TUPPER_ACCESS_TOKEN=t0ken"}, Args: agentArgs(&backend.Spec{}), Pids: 128}
	const size = 128 << 20
	if err := makeRWDisk(t.Context(), mkfs, disk, filepath.Join(dir, "staging"), size, boot); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "staging")); !os.IsNotExist(err) {
		t.Errorf("the staging directory stays: %v", err)
	}
	e2fsck(t, disk)
	if l := superblock(t, disk)["Filesystem volume name"]; l != rwLabel {
		t.Errorf("label %q", l)
	}
	var st unix.Stat_t
	if err := unix.Stat(disk, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size {
		t.Errorf("size %d, want %d", st.Size, size)
	}
	if used := st.Blocks * 512; used > size/4 {
		t.Errorf("the disk takes %d bytes of the host's for its %d: not sparse", used, size)
	}
	got := listDisk(t, disk, []string{"/"})
	for _, d := range []string{"/upper", "/work"} {
		if e, ok := got[d]; !ok || e.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s: %+v", d, e)
		}
	}
	if e := got["/"+bootConfigName]; e.Mode != unix.S_IFREG|0o600 || e.UID != 0 {
		t.Errorf("the boot configuration: mode %o, owner %d; want 0600 root's", e.Mode, e.UID)
	}
	out, err := exec.Command("debugfs", "-R", "cat /"+bootConfigName, disk).Output()
	if err != nil {
		t.Fatal(err)
	}
	var back bootConfig
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("boot configuration %q: %v", out, err)
	}
	if d := cmp.Diff(boot, &back); d != "" {
		t.Errorf("boot configuration (-want +got):\n%s", d)
	}
	// The guest's init reads these keys (cmd/tupper-agent,
	// vmBootConfiguration).
	for _, k := range []string{`"hostname":`, `"env":`, `"args":`, `"pids":`} {
		if !strings.Contains(string(out), k) {
			t.Errorf("the boot configuration lacks %s: %s", k, out)
		}
	}
}

func TestImageKey(t *testing.T) {
	root := t.TempDir()
	k1, err := imageKey(&backend.Spec{RootFS: root})
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := imageKey(&backend.Spec{RootFS: root, Image: &backend.Image{ChainID: "sha256:aa"}})
	k3, _ := imageKey(&backend.Spec{RootFS: "/elsewhere", Image: &backend.Image{ChainID: "sha256:aa"}})
	k4, _ := imageKey(&backend.Spec{RootFS: root, Image: &backend.Image{ChainID: "sha256:bb"}})
	if k1 == k2 || k2 != k3 || k2 == k4 {
		t.Errorf("keys: root %s, chain aa %s, chain aa elsewhere %s, chain bb %s", k1, k2, k3, k4)
	}
	os.Chtimes(root, time.Unix(1, 0), time.Unix(1, 0))
	if k5, _ := imageKey(&backend.Spec{RootFS: root}); k5 == k1 {
		t.Error("a root whose time changed keeps its key")
	}
}
