package oci

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Floors are the smallest limits a backend takes; zero means no floor.
type Floors struct {
	MemoryBytes int64
	// MemoryWhy says why memory has its floor, for the error.
	MemoryWhy string
	DiskBytes int64
	Pids      int64
}

// ValidateSpec checks spec before a backend makes anything for it: the id,
// an absolute RootFS directory that overlayfs can take (no ',', ':' or
// '\'), an absolute agent file, limits that are not negative and not under
// floors, and KEY=VALUE environment entries. Its errors are of class
// errdefs.ErrInvalidArgument, or errdefs.ErrNotFound for a missing root or
// agent.
func ValidateSpec(s *backend.Spec, floors Floors) error {
	if err := network.ValidateID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.RootFS) {
		return fmt.Errorf("sandbox %q: RootFS %q must be absolute: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(s.RootFS, ",:\\") {
		return fmt.Errorf("sandbox %q: RootFS %q holds ',', ':' or '\\', which overlayfs cannot take: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(s.RootFS); err != nil {
		return fmt.Errorf("sandbox %q: RootFS: %w: %w", s.ID, errdefs.ErrNotFound, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("sandbox %q: RootFS %s is not a directory: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(s.Agent.Path) {
		return fmt.Errorf("sandbox %q: agent path %q must be absolute: %w", s.ID, s.Agent.Path, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(s.Agent.Path); err != nil {
		return fmt.Errorf("sandbox %q: agent: %w: %w", s.ID, errdefs.ErrNotFound, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("sandbox %q: agent %s is not a regular file: %w", s.ID, s.Agent.Path, errdefs.ErrInvalidArgument)
	}
	r := s.Resources
	switch {
	case r.CPUs < 0 || r.MemoryBytes < 0 || r.Pids < 0 || r.DiskBytes < 0:
		return fmt.Errorf("sandbox %q: negative resources %+v: %w", s.ID, r, errdefs.ErrInvalidArgument)
	case r.MemoryBytes != 0 && r.MemoryBytes < floors.MemoryBytes:
		return fmt.Errorf("sandbox %q: memory limit %d is below %d MiB, %s: %w", s.ID, r.MemoryBytes, floors.MemoryBytes>>20, floors.MemoryWhy, errdefs.ErrInvalidArgument)
	case r.DiskBytes != 0 && r.DiskBytes < floors.DiskBytes:
		return fmt.Errorf("sandbox %q: disk cap %d is below %d MiB: %w", s.ID, r.DiskBytes, floors.DiskBytes>>20, errdefs.ErrInvalidArgument)
	case r.Pids != 0 && r.Pids < floors.Pids:
		return fmt.Errorf("sandbox %q: a limit of %d tasks is below %d: %w", s.ID, r.Pids, floors.Pids, errdefs.ErrInvalidArgument)
	case r.CPUs != 0 && r.CPUs < 0.01:
		return fmt.Errorf("sandbox %q: %v CPUs is below 0.01: %w", s.ID, r.CPUs, errdefs.ErrInvalidArgument)
	}
	for _, kv := range s.Env {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("sandbox %q: env entry %q is not KEY=VALUE: %w", s.ID, kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// HasEnv reports whether env sets key.
func HasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return true
		}
	}
	return false
}

var cgroupPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)

// ValidCgroupParent reports whether p is a cgroup path relative to each
// hierarchy's root, with no way up out of it.
func ValidCgroupParent(p string) bool {
	return cgroupPattern.MatchString(p) && path.Clean(p) == p && !strings.Contains("/"+p+"/", "/../")
}
