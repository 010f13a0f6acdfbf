package process

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"time"

	pb "github.com/lightbearco/tupper/proto/process"
)

const (
	// chunkSize bounds one data event, as in envd.
	chunkSize = 32 << 10
	// drainLimit bounds what is read without waiting once the process has
	// exited. Everything the process wrote before exiting sits in the pipe
	// buffer, which Linux caps at 1 MiB by default (fs.pipe-max-size); the
	// bound stops a background child that keeps writing from holding the
	// end back forever.
	drainLimit = 4 << 20
)

// outputKind says which data event a stream of output becomes.
type outputKind int

const (
	outStdout outputKind = iota
	outStderr
	outPTY
)

func dataEvent(kind outputKind, b []byte) *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch kind {
	case outStdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case outStderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	case outPTY:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// pump reads one output file of h in chunks and broadcasts them until
// end-of-file (EIO for a PTY master whose last slave closed).
//
// When the process exits, supervise sets a read deadline. A pump whose
// file is still open then — a background child inherited it — takes what
// is buffered without waiting (drainNow), reports its part of the output
// done, and keeps reading into nowhere until end-of-file, so that such
// children never block on a full pipe or die of SIGPIPE. The pump owns f
// and closes it.
func (h *handle) pump(f *os.File, kind outputKind) {
	defer f.Close()
	finished := sync.OnceFunc(h.pumps.Done)
	defer finished()
	buf := make([]byte, chunkSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			h.broadcast(dataEvent(kind, bytes.Clone(buf[:n])))
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			_ = f.SetReadDeadline(time.Time{})
			drainNow(f, buf, func(b []byte) { h.broadcast(dataEvent(kind, bytes.Clone(b))) })
			finished()
			discard(f, buf)
		}
		return
	}
}

// discard reads f until it fails.
func discard(f *os.File, buf []byte) {
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}
