package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// createNetNS makes a new network namespace and bind-mounts it at path,
// which must not exist. Unless ipv6 is set, IPv6 is off by default in the
// new namespace, so the interfaces made there later get no address of it;
// with ipv6, they take no router advertisements and skip duplicate address
// detection, since the pool alone addresses them.
//
// The namespace is entered on a thread of its own that is never unlocked:
// when the goroutine ends, the Go runtime ends the thread with it, so no
// goroutine ever runs in the wrong namespace, whatever fails on the way.
func createNetNS(path string, ipv6 bool) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("netns %s: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("netns %s: %w", path, err)
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: see above.
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			// /proc/sys/net is the namespace of the thread that opens it.
			settings := map[string]string{"disable_ipv6": "1"}
			if ipv6 {
				settings = map[string]string{"disable_ipv6": "0", "accept_ra": "0", "accept_dad": "0"}
			}
			for k, v := range settings {
				err := os.WriteFile("/proc/sys/net/ipv6/conf/default/"+k, []byte(v), 0o644)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("ipv6 %s: %w", k, err)
				}
			}
			src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
			if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind mount: %w", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// removeNetNS unmounts and removes the namespace bind mount at path. Nothing
// at path is fine. The namespace itself goes away with its last user.
func removeNetNS(path string) error {
	// Mounts may stack if something mounted twice; peel them all.
	for i := 0; i < 16; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		return fmt.Errorf("netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}
