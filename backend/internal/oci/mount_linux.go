package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// UnmountAll peels every mount stacked at target.
func UnmountAll(target string) error {
	for range 16 {
		err := unix.Unmount(target, unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return fmt.Errorf("%s: still mounted after 16 unmounts", target)
}

// RemoveBundle removes the bundle directory dir, but never while something
// is mounted below it: removing a mounted rootfs would recurse into it.
func RemoveBundle(dir string) error {
	mounted, err := MountsBelow(dir)
	if err != nil {
		return err
	}
	if len(mounted) > 0 {
		return fmt.Errorf("bundle %s: not removed, mounts remain: %v", dir, mounted)
	}
	return os.RemoveAll(dir)
}

// MountsBelow returns the mount points at or under dir.
func MountsBelow(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := UnescapeMountPath(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// consoleFile is the console in LogDir.
const consoleFile = "console.log"

// LogDir holds the sandbox's console (consoleFile): the runtime's messages, then
// the agent's output. It is a tmpfs of its own, of LogSize, because the
// console is a host file that root in the sandbox can write to (through
// /proc/1/fd/1): on the host's disk it would be a way around the disk cap.
// A full console fails the write with ENOSPC; what came first, the runtime's
// start-up messages among it, stays.
const (
	LogDir  = "log"
	LogSize = 4 << 20
)

// ConsolePath is the console file of the sandbox whose bundle is dir.
func ConsolePath(dir string) string { return filepath.Join(dir, LogDir, consoleFile) }

// MountLog mounts the tmpfs of dir's LogDir.
func MountLog(dir string) error {
	p := filepath.Join(dir, LogDir)
	if err := os.Mkdir(p, 0o700); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	opts := fmt.Sprintf("size=%d,mode=0700", LogSize)
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("console: mount a tmpfs at %s: %w", p, err)
	}
	return nil
}
