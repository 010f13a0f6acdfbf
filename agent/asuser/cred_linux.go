package asuser

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unchanged is -1 as an id argument of setresuid(2) and setresgid(2).
const unchanged = ^uintptr(0)

// These are the raw system calls, which change the calling thread only:
// unix.Setresuid and syscall.Setresuid change every thread of the process.
// Each one costs a trip into gVisor's kernel, so become and restore make no
// more than they need.

// current returns the calling thread's effective user and group and its
// supplementary groups.
func current() (cred, error) {
	gids, err := unix.Getgroups()
	if err != nil {
		return cred{}, fmt.Errorf("getgroups: %w", err)
	}
	c := cred{uid: uint32(unix.Geteuid()), gid: uint32(unix.Getegid())}
	for _, g := range gids {
		c.groups = append(c.groups, uint32(g))
	}
	return c, nil
}

// become gives the calling thread, a root thread, c's supplementary groups,
// effective group and effective user, in that order (once the user is not
// root, the groups cannot change). The real and saved ids stay root's.
func become(c cred) error {
	if err := setgroups(c.groups); err != nil {
		return err
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, unchanged, uintptr(c.gid), unchanged); errno != 0 {
		return fmt.Errorf("setresgid %d: %w", c.gid, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, uintptr(c.uid), unchanged); errno != 0 {
		return fmt.Errorf("setresuid %d: %w", c.uid, errno)
	}
	return nil
}

// restore gives the calling thread back the agent's credentials c (root's)
// after become, whole or partial: the thread's real and saved user ids,
// root's, let it become root again first, and root regains its
// capabilities with it.
func restore(c cred) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, 0, unchanged); errno != 0 {
		return fmt.Errorf("setresuid 0: %w", errno)
	}
	if err := setgroups(c.groups); err != nil {
		return err
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, unchanged, uintptr(c.gid), unchanged); errno != 0 {
		return fmt.Errorf("setresgid %d: %w", c.gid, errno)
	}
	if c.uid != 0 {
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, uintptr(c.uid), unchanged); errno != 0 {
			return fmt.Errorf("setresuid %d: %w", c.uid, errno)
		}
	}
	return nil
}

func setgroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); errno != 0 {
		return fmt.Errorf("setgroups %v: %w", groups, errno)
	}
	return nil
}
