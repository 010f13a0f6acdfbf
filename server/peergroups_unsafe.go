//go:build linux

package server

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroups returns the supplementary groups of the process at the other
// end of unix socket fd as they were when it connected (SO_PEERGROUPS,
// Linux 4.13 and later), which no later change of that process, nor a
// process that takes its pid, can alter. golang.org/x/sys has no wrapper
// for this option: it fills an array of gid_t.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == unix.ERANGE && int(size/4) > len(buf):
			// size is now what the groups need.
			buf = make([]uint32, size/4)
			continue
		case errno != 0:
			return nil, errno
		}
		return buf[:size/4], nil
	}
}
