//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// chrootEnv is set by the stand-in jailer for the stand-in Firecracker: the
// directory that the real jailer would have made its root. Paths that the
// API gives are resolved under it.
const chrootEnv = "TUPPER_FAKEFC_CHROOT"

// jailerRecordEnv names a file to which the stand-in jailer appends its
// command line, as a JSON array.
const jailerRecordEnv = "TUPPER_FAKEJAILER_RECORD"

// inChroot returns path as the stand-in, jailed, would see it.
func inChroot(path string) string {
	root := os.Getenv(chrootEnv)
	if root == "" || path == "" {
		return path
	}
	if !filepath.IsAbs(path) {
		return filepath.Join(root, path)
	}
	return filepath.Join(root, path)
}

var jailerID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// multi is a repeatable flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// jailer stands in for Firecracker's jailer (docs/jailer.md): it takes the
// jailer's command line, makes the chroot <chroot-base-dir>/<exec name>/<id>/root
// with a copy of the exec file and /dev/kvm, the cgroup
// <parent-cgroup>/<id> with the --cgroup values, joins it, hands the
// chroot to uid:gid, and executes the copy with --id=<id> and the
// arguments after "--". It does not chroot or drop privileges (the
// stand-in needs the host's runc), but it checks what the jailed VMM
// could not do as uid: read the kernel, initramfs and image disk, and
// write the writable disk.
func jailer(args []string) error {
	if path := os.Getenv(jailerRecordEnv); path != "" {
		b, _ := json.Marshal(append([]string{os.Args[0]}, args...))
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			f.Write(append(b, '\n'))
			f.Close()
		}
	}
	fs := flag.NewFlagSet("jailer", flag.ContinueOnError)
	id := fs.String("id", "", "")
	execFile := fs.String("exec-file", "", "")
	uid := fs.Int("uid", -1, "")
	gid := fs.Int("gid", -1, "")
	base := fs.String("chroot-base-dir", "/srv/jailer", "")
	cgroupVersion := fs.Int("cgroup-version", 1, "")
	parent := fs.String("parent-cgroup", "", "")
	var cgroups, limits multi
	fs.Var(&cgroups, "cgroup", "")
	fs.Var(&limits, "resource-limit", "")
	fs.String("netns", "", "")
	fs.Bool("daemonize", false, "")
	fs.Bool("new-pid-ns", false, "")
	version := fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version {
		fmt.Println("Jailer v1.16.1-stand-in (tupper's fakefirecracker)")
		return nil
	}
	switch {
	case !jailerID.MatchString(*id):
		return fmt.Errorf("invalid id %q", *id)
	case !filepath.IsAbs(*execFile) || !strings.Contains(filepath.Base(*execFile), "firecracker"):
		return fmt.Errorf("exec file %q: absolute, and its name must hold \"firecracker\"", *execFile)
	case *uid < 0 || *gid < 0:
		return errors.New("--uid and --gid are required")
	case !filepath.IsAbs(*base):
		return fmt.Errorf("chroot base %q must be absolute", *base)
	case *cgroupVersion != 1 && *cgroupVersion != 2:
		return fmt.Errorf("cgroup version %d", *cgroupVersion)
	}
	name := filepath.Base(*execFile)
	if *parent == "" {
		*parent = name
	}
	root := filepath.Join(*base, name, *id, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	exe := filepath.Join(root, name)
	if err := copyFile(*execFile, exe); err != nil {
		return err
	}
	if err := joinCgroups(*cgroupVersion, *parent, *id, cgroups); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	kvm := filepath.Join(root, "dev", "kvm")
	if err := unix.Mknod(kvm, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 232))); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	for _, p := range []string{root, kvm} {
		if err := os.Chown(p, *uid, *gid); err != nil {
			return err
		}
	}
	if err := checkAccess(root, *uid, *gid); err != nil {
		return err
	}
	rest := fs.Args()
	argv := append([]string{exe, "--id=" + *id, "--start-time-us=0", "--start-time-cpu-us=0"}, rest...)
	if err := os.Chdir(root); err != nil {
		return err
	}
	return syscall.Exec(exe, argv, append(os.Environ(), chrootEnv+"="+root))
}

// checkAccess fails when uid:gid could not use the VMM's files in root: the
// jailed VMM opens the image disk for reading, the writable disk for
// writing, and, when they are there, the kernel and initramfs (a boot) or
// the snapshot's state and memory (a restore) for reading.
func checkAccess(root string, uid, gid int) error {
	files := map[string]bool{"base.ext4": false, "rw.ext4": true}
	for _, name := range []string{"vmlinux", "initramfs.cpio", "restore.vmstate", "restore.mem"} {
		if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
			files[name] = false
		}
	}
	_, boot := files["vmlinux"]
	_, restore := files["restore.vmstate"]
	if !boot && !restore {
		return errors.New("the jailed VMM's root holds neither a kernel (vmlinux) nor a snapshot (restore.vmstate)")
	}
	for name, write := range files {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, name), &st); err != nil {
			return fmt.Errorf("the jailed VMM's %s: %w", name, err)
		}
		want := uint32(0o4)
		if write {
			want = 0o6
		}
		var bits uint32
		switch {
		case int(st.Uid) == uid:
			bits = st.Mode >> 6 & 7
		case int(st.Gid) == gid:
			bits = st.Mode >> 3 & 7
		default:
			bits = st.Mode & 7
		}
		if bits&want != want {
			return fmt.Errorf("the jailed VMM (uid %d) cannot %s %s: mode %o, owner %d:%d", uid, map[bool]string{false: "read", true: "write"}[write], name, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return nil
}

// joinCgroups makes cgroup <parent>/<id> where each --cgroup file's
// controller is, writes the values, and joins it.
func joinCgroups(version int, parent, id string, settings []string) error {
	dirs := map[string]bool{}
	for _, kv := range settings {
		file, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--cgroup %q is not file=value", kv)
		}
		mount, err := cgroupMount(version, file)
		if err != nil {
			return err
		}
		dir := filepath.Join(mount, parent, id)
		if version == 2 {
			controller, _, _ := strings.Cut(file, ".")
			p := mount
			for _, part := range strings.Split(filepath.Join(parent, id), "/") {
				os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte("+"+controller), 0)
				p = filepath.Join(p, part)
				os.Mkdir(p, 0o755)
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, file), err)
		}
		dirs[dir] = true
	}
	for dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return err
		}
	}
	return nil
}

// cgroupMount finds the hierarchy that has file, as the jailer finds it
// from /proc/mounts.
func cgroupMount(version int, file string) (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (version == 1 && f[2] != "cgroup") || (version == 2 && f[2] != "cgroup2") {
			continue
		}
		if version == 2 {
			return f[1], nil
		}
		if _, err := os.Stat(filepath.Join(f[1], file)); err == nil {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no cgroup v%d hierarchy has %s", version, file)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
