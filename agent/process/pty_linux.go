package process

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal of size ws. The slave goes to the child;
// the master stays with the agent for output, input and resizes.
//
// pty.Open's own ioctls go through File.Fd, which switches the master to
// blocking mode and takes it out of Go's poller. The master is therefore
// re-wrapped as a non-blocking file, because the end of a process relies
// on read deadlines (see pump) and blocked writes must be interruptible.
func openPTY(ws winsize) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		s.Close()
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, ws); err != nil {
		master.Close()
		s.Close()
		return nil, nil, err
	}
	return master, s, nil
}

// setWinsize sets the terminal size through the master without touching
// its blocking mode.
func setWinsize(master *os.File, ws winsize) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.rows, Col: ws.cols})
	}); err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	if ioErr != nil {
		return fmt.Errorf("resize pty: %w", ioErr)
	}
	return nil
}
