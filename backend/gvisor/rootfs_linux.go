package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lightbearco/tupper/backend/internal/oci"
	"golang.org/x/sys/unix"
)

// A sandbox's root filesystem has two copy-on-write layers, each for a
// reason of its own.
//
// The outer one is a host overlayfs at <bundle>/rootfs: the shared image as
// its only lower layer, upper and work dirs in the bundle. It exists for
// runsc's gofer, which bind-mounts each of the spec's bind mounts (the
// agent) into the root on the host side and first creates any mount
// point the image lacks. Without this layer those mount points would be
// written into the shared image. Nothing else reaches its upper layer.
//
// The inner one is runsc's own overlay (see Backend.overlayFlag), which
// takes every write the sandbox makes.

// rootfsErr wraps errors about the rootfs mount.
func rootfsErr(dir string, err error) error {
	return fmt.Errorf("rootfs %s: %w", filepath.Join(dir, rootfsDir), err)
}

// mountRootFS mounts the overlay of image at <dir>/rootfs and returns its
// path.
func mountRootFS(image, dir string) (string, error) {
	target := filepath.Join(dir, rootfsDir)
	upper := filepath.Join(dir, overlayDir, "upper")
	work := filepath.Join(dir, overlayDir, "work")
	for _, d := range []string{target, upper, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", rootfsErr(dir, err)
		}
	}
	// overlayfs shows the upper dir's owner and mode on the merged root:
	// they must be the image's, or / is root's 0700 to everyone else.
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return "", rootfsErr(dir, err)
	}
	if err := unix.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return "", rootfsErr(dir, err)
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return "", rootfsErr(dir, err)
	}
	if err := placeTmp(image, upper); err != nil {
		return "", rootfsErr(dir, err)
	}
	opts := "lowerdir=" + image + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return "", rootfsErr(dir, fmt.Errorf("mount overlay: %w", err))
	}
	return target, nil
}

// tmpPlaceholder is the file that keeps runsc's own tmpfs off the
// sandbox's /tmp. When the spec mounts nothing at /tmp and the root's /tmp
// is empty, runsc mounts a tmpfs there: memory, not disk, and outside the
// disk cap of the root's layer. The sandbox's /tmp must be the root's, in
// that capped layer on disk, and not a host directory either (a bind mount
// would put the sandbox's files on the host, under its uids and modes, with
// no cap). So the host overlay puts this file into /tmp, runsc sees a /tmp
// that is not empty and leaves it alone, and the agent, as the sandbox's
// first process, removes the file before it serves (cmd/tupper-agent).
const tmpPlaceholder = ".tupper-placeholder"

// placeTmp puts tmpPlaceholder into the /tmp of the host overlay whose
// lower layer is image and upper dir upper. That /tmp is root's and 1777,
// whatever the image's (as the tmpfs runsc would have mounted): every user
// of the sandbox may write there. An image whose /tmp is not a directory (a
// symlink, say) is left as it is: runsc may then mount its tmpfs where the
// link leads, which is memory and bounded by the sandbox's memory limit.
func placeTmp(image, upper string) error {
	var st unix.Stat_t
	err := unix.Lstat(filepath.Join(image, "tmp"), &st)
	switch {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return nil
	case err != nil && !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("image /tmp: %w", err)
	}
	tmp := filepath.Join(upper, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tmp, tmpPlaceholder),
		[]byte("Keeps runsc from mounting a memory tmpfs at /tmp; the agent removes it.\n"), 0o644)
}

// hostSafeDirs are the bundle's directories that hold what the sandbox
// writes (its overlay's filestore): they are bind-mounted onto themselves
// nosuid and nodev, so that nothing there means anything on the host should
// a file ever land there under its own name.
var hostSafeDirs = []string{upperDir}

// mountHostSafe makes each of dir's hostSafeDirs a nosuid, nodev mount of
// itself.
func mountHostSafe(dir string) error {
	for _, d := range hostSafeDirs {
		p := filepath.Join(dir, d)
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return rootfsErr(dir, fmt.Errorf("bind %s: %w", d, err))
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return rootfsErr(dir, fmt.Errorf("remount %s nosuid,nodev: %w", d, err))
		}
	}
	return nil
}

// legacyTmpDir is where sandboxes started by earlier versions had their
// /tmp, a host directory mounted onto itself: a restarted daemon still
// stops them.
const legacyTmpDir = "tmp"

// unmountRootFS unmounts <dir>/rootfs, the hostSafeDirs mounts, the log
// tmpfs and an earlier version's legacyTmpDir; nothing mounted there is
// fine.
func unmountRootFS(dir string) error {
	var errs []error
	for _, d := range append([]string{rootfsDir, oci.LogDir, legacyTmpDir}, hostSafeDirs...) {
		if err := oci.UnmountAll(filepath.Join(dir, d)); err != nil {
			errs = append(errs, rootfsErr(dir, err))
		}
	}
	return errors.Join(errs...)
}
