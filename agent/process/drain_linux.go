package process

import (
	"os"
	"syscall"
)

// drainNow reads from f whatever is buffered, without waiting for more,
// handing each chunk to emit, up to drainLimit bytes. f must be pollable
// (non-blocking), as os.Pipe ends and the re-wrapped PTY master are.
func drainNow(f *os.File, buf []byte, emit func([]byte)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < drainLimit; {
		var n int
		var rerr error
		// Returning true even on EAGAIN stops RawConn.Read from waiting
		// for more: empty means drained.
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = syscall.Read(int(fd), buf)
				if rerr != syscall.EINTR {
					return true
				}
			}
		})
		if err != nil || rerr != nil || n <= 0 {
			return
		}
		emit(buf[:n])
		total += n
	}
}
