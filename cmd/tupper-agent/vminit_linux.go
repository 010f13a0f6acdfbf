package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The agent is also the init of a microVM (backend/firecracker). The
// kernel boots an initramfs that holds the agent as /init and the kernel
// modules the guest needs; the agent, started as /init with PID 1:
//
//  1. mounts /proc, /sys and /dev, and loads the modules that
//     /modules/order names (virtio-mmio, virtio-blk, vsock, overlay…; a
//     kernel with those built in has none);
//  2. finds the two disks by their ext4 labels: the image, read-only
//     (vmBaseLabel), and the sandbox's own writable disk (vmRWLabel), and
//     mounts an overlay of the second's upper/ over the first as the new
//     root, with /proc, /sys, /dev, /dev/pts, /dev/shm and the sandbox's
//     cgroup in it;
//  3. reads the boot configuration that the host left on the writable
//     disk (vmBootConfig: environment, arguments, host name, task limit)
//     and removes it;
//  4. makes the new root the root (MS_MOVE and chroot: an initramfs
//     cannot be pivoted away) with itself read-only at
//     /.tupper/tupper-agent, and executes itself from there as the
//     agent, still PID 1.
//
// Any failure is printed on the console and the machine is restarted,
// which ends a Firecracker microVM.
const (
	vmInitPath    = "/init"
	vmModuleOrder = "/modules/order"
	vmBaseLabel   = "tupper-base"
	vmRWLabel     = "tupper-rw"
	vmBootConfig  = "tupper-boot.json"
	vmAgentPath   = "/.tupper/tupper-agent"
	// vmDiskTimeout bounds the wait for the disks to show up once their
	// driver is loaded.
	vmDiskTimeout = 10 * time.Second
	// Limits on open files, as the gVisor backend gives.
	vmOpenFilesSoft = 1024
	vmOpenFilesHard = 65536
)

// vmBootConfiguration is what the host tells the guest's init; the host
// side writes it in backend/firecracker (bootConfig), with the same JSON.
type vmBootConfiguration struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env"`
	Args     []string `json:"args"`
	Pids     int64    `json:"pids,omitempty"`
}

// isVMInit reports whether the agent runs as a microVM's init.
func isVMInit() bool { return os.Getpid() == 1 && len(os.Args) > 0 && os.Args[0] == vmInitPath }

// vmInitMain boots the guest and executes the agent; it returns only on
// failure, after restarting the machine has failed too.
func vmInitMain() {
	err := vmInit()
	fmt.Fprintln(os.Stderr, "tupper-agent init:", err)
	unix.Sync()
	if rerr := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); rerr != nil {
		fmt.Fprintln(os.Stderr, "tupper-agent init: restart:", rerr)
	}
	os.Exit(1)
}

func vmInit() error {
	for _, m := range []struct{ target, fstype string }{
		{"/proc", "proc"}, {"/sys", "sysfs"}, {"/dev", "devtmpfs"},
	} {
		if err := mountAt(m.fstype, m.target, m.fstype, unix.MS_NOSUID, ""); err != nil {
			return err
		}
	}
	if err := loadModules(vmModuleOrder); err != nil {
		return err
	}
	baseDev, rwDev, err := findDisks(vmDiskTimeout)
	if err != nil {
		return err
	}
	if err := mountAt(baseDev, "/mnt/base", "ext4", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return err
	}
	if err := mountAt(rwDev, "/mnt/rw", "ext4", unix.MS_NODEV, ""); err != nil {
		return err
	}
	cfg, err := readBootConfig(filepath.Join("/mnt/rw", vmBootConfig))
	if err != nil {
		return err
	}
	// The root of the overlay is its upper directory: give it the
	// image's root's owner and mode, or unprivileged users reach nothing.
	var st unix.Stat_t
	if err := unix.Stat("/mnt/base", &st); err != nil {
		return fmt.Errorf("stat the image's root: %w", err)
	}
	for _, d := range []string{"/mnt/rw/upper", "/mnt/rw/work"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Lchown("/mnt/rw/upper", int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod("/mnt/rw/upper", st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod the overlay's root: %w", err)
	}
	const root = "/newroot"
	if err := mountAt("overlay", root, "overlay", 0, "lowerdir=/mnt/base,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work"); err != nil {
		return err
	}
	if err := sandboxCgroup(cfg.Pids); err != nil {
		// As in the agent's own limits: a sandbox without its task
		// limit still runs, and RLIMIT_NPROC holds each user.
		fmt.Fprintln(os.Stderr, "tupper-agent init: no cgroup of the sandbox's own, so no task limit for all its users together:", err)
	}
	mounts := []struct {
		source, target, fstype string
		flags                  uintptr
		data                   string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY, ""},
		// The sandbox's cgroup as the root of the cgroup namespace made
		// above: the agent writes the task limit into its pids.max, and
		// programs that size themselves by their cgroup read it there.
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, ""},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"shm", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tupper", "/.tupper", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755,size=64k"},
	}
	for _, m := range mounts {
		if err := mountAt(m.source, root+m.target, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	if err := placeAgent(root); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join("/mnt/rw", vmBootConfig)); err != nil {
		return fmt.Errorf("remove the boot configuration: %w", err)
	}
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fmt.Errorf("host name: %w", err)
		}
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := setLimits(cfg.Pids); err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the new root to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	env := cfg.Env
	if !hasKey(env, "PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	argv := append([]string{vmAgentPath}, cfg.Args...)
	return fmt.Errorf("execute the agent: %w", syscall.Exec(vmAgentPath, argv, env))
}

// mountAt makes target and mounts source there.
func mountAt(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// loadModules loads the kernel modules that the file order names, one a
// line, from its directory, in that order. A missing order file means a
// kernel that needs none.
func loadModules(order string) error {
	b, err := os.ReadFile(order)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dir := filepath.Dir(order)
	for _, name := range strings.Fields(string(b)) {
		if err := loadModule(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", filepath.Base(path), err)
	}
	return nil
}

// vmDisksEnv, when set (the kernel passes its command line's
// TUPPER_DISKS=vda,vdb to init as a variable), names the only block
// devices findDisks looks at; by default it looks at all.
const vmDisksEnv = "TUPPER_DISKS"

// findDisks waits for the block devices labelled vmBaseLabel and
// vmRWLabel and returns their device nodes.
func findDisks(timeout time.Duration) (base, rw string, err error) {
	var only []string
	if v := os.Getenv(vmDisksEnv); v != "" {
		only = strings.Split(v, ",")
	}
	deadline := time.Now().Add(timeout)
	for {
		entries, _ := os.ReadDir("/sys/class/block")
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join("/sys/class/block", e.Name(), "partition")); err == nil {
				continue
			}
			if only != nil && !slices.Contains(only, e.Name()) {
				continue
			}
			dev := "/dev/" + e.Name()
			switch ext4Label(dev) {
			case vmBaseLabel:
				base = dev
			case vmRWLabel:
				rw = dev
			}
		}
		if base != "" && rw != "" {
			return base, rw, nil
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return "", "", fmt.Errorf("disks %q and %q not found within %v (block devices: %q)", vmBaseLabel, vmRWLabel, timeout, names)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ext4Label returns the volume label of the ext2/3/4 file system on dev, or
// "" when there is none.
func ext4Label(dev string) string {
	f, err := os.Open(dev)
	if err != nil {
		return ""
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return ""
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return ""
	}
	label, _, _ := bytes.Cut(sb[0x78:0x88], []byte{0})
	return string(label)
}

// readBootConfig reads the host's boot configuration.
func readBootConfig(path string) (*vmBootConfiguration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("boot configuration: %w", err)
	}
	var c vmBootConfiguration
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("boot configuration %s: %w", path, err)
	}
	for _, kv := range c.Env {
		if !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("boot configuration: env entry %q is not KEY=VALUE", kv)
		}
	}
	return &c, nil
}

// sandboxCgroup moves init into a cgroup of its own, "sandbox", with the
// pids controller (and pids.max at pids, when not zero), and makes that
// cgroup the root of a new cgroup namespace, so that the sandbox sees its
// own limits at the root of /sys/fs/cgroup as a container would.
func sandboxCgroup(pids int64) error {
	const top = "/sys/fs/cgroup"
	if err := unix.Mount("cgroup2", top, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount cgroup2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(top, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		return fmt.Errorf("enable the pids controller: %w", err)
	}
	sb := filepath.Join(top, "sandbox")
	if err := os.Mkdir(sb, 0o755); err != nil {
		return err
	}
	if pids > 0 {
		if err := os.WriteFile(filepath.Join(sb, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
			return fmt.Errorf("pids.max: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(sb, "cgroup.procs"), []byte("0"), 0); err != nil {
		return fmt.Errorf("join the sandbox cgroup: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	return nil
}

// placeAgent puts this binary, read-only, at vmAgentPath under root: a
// bind mount of /init onto a file of the small tmpfs at /.tupper, which is
// then made read-only too.
func placeAgent(root string) error {
	dst := root + vmAgentPath
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(vmInitPath, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the agent: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the agent read-only: %w", err)
	}
	dir := filepath.Dir(dst)
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("make %s read-only: %w", filepath.Dir(vmAgentPath), err)
	}
	return nil
}

// loopbackUp brings up lo: servers in the sandbox listen on localhost, and
// the agent's forwarding port dials them there.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// setLimits gives the agent, and so every command, the sandbox's limits
// on tasks (RLIMIT_NPROC, which the agent turns into the cgroup's
// pids.max and a lower per-user limit) and on open files.
func setLimits(pids int64) error {
	if pids > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(pids), Max: uint64(pids)}); err != nil {
			return fmt.Errorf("RLIMIT_NPROC: %w", err)
		}
	}
	err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: vmOpenFilesSoft, Max: vmOpenFilesHard})
	if errors.Is(err, unix.EPERM) {
		// Without CAP_SYS_RESOURCE (a test's namespaces, not a VM's init)
		// the hard limit cannot rise: keep it.
		var cur unix.Rlimit
		if err = unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil {
			err = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: min(vmOpenFilesSoft, cur.Max), Max: cur.Max})
		}
	}
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	return nil
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}
