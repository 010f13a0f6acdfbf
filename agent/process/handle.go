package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// exitGrace is how long the end of a process waits, after its exit, for
// its output pipes to reach end-of-file. They do at once unless a
// background child inherited them; then what is already buffered is sent
// and the end follows, rather than waiting for the child.
const exitGrace = 50 * time.Millisecond

// handle is one process the service started. It outlives the streams
// following it and is forgotten once its end event is out.
//
// Ownership: spawn creates it; the output pumps own the output files (and
// close them); supervise owns the end of its life. Fields below mu are
// guarded by it; the rest are fixed once spawn returns.
type handle struct {
	pid    uint32
	tag    *string
	config *pb.ProcessConfig
	seq    uint64
	log    *slog.Logger

	pty   *os.File       // PTY master for PTY processes, else nil; input and resizes go here
	inMu  sync.Mutex     // serialises writers of stdin or the PTY
	pumps sync.WaitGroup // output pumps still delivering output of the process itself
	done  chan struct{}  // closed once end is set: every byte of output was broadcast

	mu        sync.Mutex
	stdin     *os.File // write end of the stdin pipe; nil when none or closed
	subs      map[*subscriber]struct{}
	exited    bool // reaped: the pid may be reused, so signals must not go to it
	killTimer *time.Timer
	end       *pb.ProcessEvent_EndEvent
}

func newHandle(req *pb.StartRequest, log *slog.Logger) *handle {
	return &handle{
		tag:    req.Tag,
		config: req.GetProcess(),
		log:    log,
		done:   make(chan struct{}),
		subs:   make(map[*subscriber]struct{}),
	}
}

// markExited runs in the reaper right after the process is reaped, so no
// signal meant for it can reach a process that reuses its pid.
func (h *handle) markExited() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exited = true
	if h.killTimer != nil {
		h.killTimer.Stop()
	}
}

// exitStatus is how a child ended.
type exitStatus struct {
	ws syscall.WaitStatus
	// outOfMemory says why the sandbox's out-of-memory killer killed the
	// child (MarkOutOfMemory); empty when it did not.
	outOfMemory string
}

// supervise waits for the process to exit and its output to be
// broadcast, then calls onEnd and publishes the end event.
func (h *handle) supervise(exit <-chan exitStatus, outputs []*os.File, onEnd func(*handle)) {
	st := <-exit
	// Wake the pumps after a short grace: output the process wrote before
	// exiting is in the pipe already and is drained without waiting.
	grace := time.Now().Add(exitGrace)
	for _, f := range outputs {
		_ = f.SetReadDeadline(grace)
	}
	h.pumps.Wait()

	end := endEvent(st.ws, st.outOfMemory)
	h.mu.Lock()
	h.end = end
	h.subs = nil
	stdin := h.stdin
	h.stdin = nil
	h.mu.Unlock()
	// Out of the table first: whoever sees the end event must then find
	// the process gone (a kill after it answers "not found").
	onEnd(h)
	close(h.done)
	if stdin != nil {
		// Background children that inherited stdin now see end-of-file.
		stdin.Close()
	}
	h.log.Info("process ended", "status", end.GetStatus())
}

// endEvent describes an exit status the way Go's os.ProcessState prints
// it, which is what envd sends: "exit status 3", "signal: killed".
//
// A process the sandbox's out-of-memory killer ended (oom says why) is
// the exception: its exit code is 137, 128 + SIGKILL, as a shell and
// Docker report an OOM kill, rather than envd's -1 for any signal, and
// its error says it ran out of memory. The E2B SDKs turn it into a
// CommandExitError with exitCode 137.
func endEvent(ws syscall.WaitStatus, oom string) *pb.ProcessEvent_EndEvent {
	ev := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case ws.Exited():
		ev.Exited = true
		ev.ExitCode = int32(ws.ExitStatus())
		ev.Status = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		ev.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			ev.Status += " (core dumped)"
		}
	default:
		ev.Status = "exit status unknown"
	}
	if !ev.Exited || ev.ExitCode != 0 {
		msg := ev.Status
		if oom != "" && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			ev.ExitCode = 128 + int32(syscall.SIGKILL)
			msg += " (out of memory: " + oom + ")"
		}
		ev.Error = &msg
	}
	return ev
}

// killAt kills the process group when deadline passes, unless the process
// has ended by then. It implements envd's rule that a Start call's
// deadline bounds the life of the process it started.
func (h *handle) killAt(deadline time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exited {
		return
	}
	h.killTimer = time.AfterFunc(time.Until(deadline), func() {
		h.log.Info("start deadline passed, killing process group")
		if err := h.signal(syscall.SIGKILL); err != nil {
			h.log.Warn("kill at deadline", "err", err)
		}
	})
}

// signal sends sig to the process's group, so that children started by a
// shell go with it. After the process was reaped it does nothing: the end
// event is on its way.
func (h *handle) signal(sig syscall.Signal) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exited {
		return nil
	}
	return killGroup(int(h.pid), sig)
}

// write sends input to the process's stdin or PTY, whichever in names. It
// blocks while the process does not read, until ctx ends.
func (h *handle) write(ctx context.Context, in *pb.ProcessInput) error {
	var f *os.File
	switch in.GetInput().(type) {
	case *pb.ProcessInput_Pty:
		if h.pty == nil {
			return fmt.Errorf("process %d has no pty; send stdin input: %w", h.pid, errdefs.ErrFailedPrecondition)
		}
		f = h.pty
	case *pb.ProcessInput_Stdin:
		if h.pty != nil {
			return fmt.Errorf("process %d runs in a pty; send pty input: %w", h.pid, errdefs.ErrFailedPrecondition)
		}
		h.mu.Lock()
		f = h.stdin
		h.mu.Unlock()
		if f == nil {
			return fmt.Errorf("stdin of process %d is closed or was not requested: %w", h.pid, errdefs.ErrFailedPrecondition)
		}
	default:
		return fmt.Errorf("input needs stdin or pty bytes: %w", errdefs.ErrInvalidArgument)
	}
	data := inputBytes(in)

	h.inMu.Lock()
	defer h.inMu.Unlock()
	// Files cannot take a context; a write deadline set when ctx ends
	// unblocks the write instead, and is cleared for the next writer.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = f.SetWriteDeadline(time.Now())
		close(fired)
	})
	_, err := f.Write(data)
	if !stop() {
		<-fired
		_ = f.SetWriteDeadline(time.Time{})
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return fmt.Errorf("write input to process %d: %w", h.pid, ctx.Err())
	default:
		return fmt.Errorf("write input to process %d: %v: %w", h.pid, err, errdefs.ErrFailedPrecondition)
	}
}

func inputBytes(in *pb.ProcessInput) []byte {
	if b := in.GetPty(); b != nil {
		return b
	}
	return in.GetStdin()
}

// closeStdin closes the stdin pipe so the process reads end-of-file.
// Closing it twice is not an error. PTY processes have no separate stdin:
// their clients send ^D instead.
func (h *handle) closeStdin() error {
	if h.pty != nil {
		return fmt.Errorf("process %d runs in a pty; send ^D (0x04) instead of closing stdin: %w", h.pid, errdefs.ErrFailedPrecondition)
	}
	h.mu.Lock()
	f := h.stdin
	h.stdin = nil
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	// Closing also releases a writer blocked on the pipe.
	return f.Close()
}

// resize sets the PTY size; the kernel sends SIGWINCH to the foreground job.
func (h *handle) resize(size *pb.PTY_Size) error {
	if h.pty == nil {
		return fmt.Errorf("process %d has no pty to resize: %w", h.pid, errdefs.ErrFailedPrecondition)
	}
	return setWinsize(h.pty, winsize{cols: clampSize(size.GetCols(), defaultCols), rows: clampSize(size.GetRows(), defaultRows)})
}

// info describes the process for List.
func (h *handle) info() *pb.ProcessInfo {
	return &pb.ProcessInfo{Config: h.config, Pid: h.pid, Tag: h.tag}
}
