package oci

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupMounts returns the mount points of every cgroup hierarchy, v1
// controllers and the v2 unified one.
func CgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, UnescapeMountPath(fields[4]))
		}
	}
	return out, sc.Err()
}

// UnescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CgroupDirs returns the directories of cgroup rel (like "/tupper/<id>")
// that exist in any hierarchy.
func CgroupDirs(rel string) ([]string, error) {
	mounts, err := CgroupMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, m := range mounts {
		d := filepath.Join(m, rel)
		if seen[d] {
			continue
		}
		seen[d] = true
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out, nil
}

// RemoveCgroup kills every process left in cgroup rel, in every hierarchy,
// and removes it and its children. A missing cgroup is fine.
func RemoveCgroup(rel string) error {
	dirs, err := CgroupDirs(rel)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", rel, err)
	}
	var errs []error
	for _, d := range dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroupDir empties and removes one cgroup directory, children first.
func removeCgroupDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := cgroupProcs(dir)
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: remove: %w (%d processes left)", dir, err, len(pids))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// SwapLimitable reports whether the host swaps and the memory cgroups
// can limit memory+swap; only then is the OCI memory.swap limit set, as
// the runtimes fail on a missing memory.memsw file.
func SwapLimitable() bool {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil || len(strings.Split(strings.TrimSpace(string(b)), "\n")) < 2 {
		return false
	}
	mounts, err := CgroupMounts()
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "memory.memsw.limit_in_bytes")); err == nil {
			return true // v1 with swap accounting
		}
		if b, err := os.ReadFile(filepath.Join(m, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
			return true // v2: memory.swap.max comes with the memory controller
		}
	}
	return false
}
