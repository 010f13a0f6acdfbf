package volume

import (
	"io/fs"
	"syscall"
	"time"
)

// readFlags open a file to read without waiting on a FIFO or taking a
// terminal: a sandbox may leave either where a file is expected.
const readFlags = syscall.O_NONBLOCK | syscall.O_NOCTTY

// fillOwner sets e's owner and times from fi.
func fillOwner(e *Entry, fi fs.FileInfo) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	e.UID, e.GID = st.Uid, st.Gid
	e.Atime = time.Unix(int64(st.Atim.Sec), int64(st.Atim.Nsec))
	e.Ctime = time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
}
