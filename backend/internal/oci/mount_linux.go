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
