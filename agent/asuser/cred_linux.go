package asuser

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unchanged is -1 as an id argument of setresuid(2) and setresgid(2).
const unchanged = ^uintptr(0)

// setCreds gives the calling thread, and only it, c's supplementary groups,
// effective group and effective user, in that order (once the user is no
// longer root, the groups cannot change). The real and saved ids stay as
// they are. These are the raw system calls: unix.Setresuid and
// syscall.Setresuid change every thread of the process.
func setCreds(c cred) error {
	var groups unsafe.Pointer
	if len(c.groups) > 0 {
		groups = unsafe.Pointer(&c.groups[0])
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.groups)), uintptr(groups), 0); errno != 0 {
		return fmt.Errorf("setgroups %v: %w", c.groups, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, unchanged, uintptr(c.gid), unchanged); errno != 0 {
		return fmt.Errorf("setresgid %d: %w", c.gid, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, uintptr(c.uid), unchanged); errno != 0 {
		return fmt.Errorf("setresuid %d: %w", c.uid, errno)
	}
	return nil
}
