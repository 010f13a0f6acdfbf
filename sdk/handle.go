package sdk

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/proto/process"
)

// CommandHandle follows a process started by Commands.Start or PTY.Create,
// or attached by Commands.Connect. It owns the stream of the process's
// events: the stream lives until the process ends, the command's timeout is
// up, or Kill or Disconnect ends it, whatever the context that created the
// handle does. Its methods are safe for concurrent use.
type CommandHandle struct {
	pid    uint32
	cmds   *Commands
	cancel context.CancelFunc
	done   chan struct{}
	// deadline is when the command's timeout (WithTimeout) ends, zero
	// without one.
	deadline time.Time

	onStdout func(string)
	onStderr func(string)
	onPTY    func([]byte)

	disconnected atomic.Bool

	mu     sync.Mutex
	keep   int // see commandOptions.keep
	stdout tailBuffer
	stderr tailBuffer

	// Set by the follower goroutine before done is closed.
	result *CommandResult
	err    error
}

// eventStream is a Start or Connect stream; both carry ProcessEvents.
type eventStream interface {
	Receive() bool
	Event() *process.ProcessEvent
	Err() error
	Close() error
}

type startStream struct {
	*connect.ServerStreamForClient[process.StartResponse]
}

func (s startStream) Event() *process.ProcessEvent { return s.Msg().GetEvent() }

type connectStream struct {
	*connect.ServerStreamForClient[process.ConnectResponse]
}

func (s connectStream) Event() *process.ProcessEvent { return s.Msg().GetEvent() }

// follow waits (bounded by ctx) for the start event of stream and returns a
// handle whose goroutine reads the rest. sctx is the stream's context,
// whose deadline is the command's timeout; cancel ends the stream; follow
// owns it.
func follow(ctx, sctx context.Context, cmds *Commands, stream eventStream, cancel context.CancelFunc, o *commandOptions, onPTY func([]byte)) (*CommandHandle, error) {
	h := &CommandHandle{
		cmds:     cmds,
		cancel:   cancel,
		done:     make(chan struct{}),
		onStdout: o.onStdout,
		onStderr: o.onStderr,
		onPTY:    onPTY,
		keep:     o.keep,
	}
	h.deadline, _ = sctx.Deadline()
	// Until the process runs, the caller's ctx bounds the wait.
	stop := context.AfterFunc(ctx, cancel)
	var pending []*process.ProcessEvent
	started := false
	for !started && stream.Receive() {
		ev := stream.Event()
		switch e := ev.GetEvent().(type) {
		case *process.ProcessEvent_Start:
			h.pid = e.Start.GetPid()
			started = true
		case *process.ProcessEvent_Keepalive:
		default:
			// Data before start would break the protocol; keep it
			// rather than lose output.
			pending = append(pending, ev)
		}
	}
	if !stop() || !started {
		err := stream.Err()
		stream.Close()
		cancel()
		if ctx.Err() != nil {
			if started {
				// Nobody will ever learn this pid: do not leave the
				// process behind.
				kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = cmds.Kill(kctx, h.pid)
				kcancel()
			}
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fromConnect(err)
		}
		return nil, fmt.Errorf("stream ended before the process started: %w", errdefs.ErrUnavailable)
	}
	go h.run(stream, pending)
	return h, nil
}

// run reads the stream's events until it ends and records the outcome.
func (h *CommandHandle) run(stream eventStream, pending []*process.ProcessEvent) {
	defer close(h.done)
	defer h.cancel()
	defer stream.Close()
	var end *process.ProcessEvent_EndEvent
	handle := func(ev *process.ProcessEvent) {
		switch e := ev.GetEvent().(type) {
		case *process.ProcessEvent_Data:
			h.data(e.Data)
		case *process.ProcessEvent_End:
			end = e.End
		}
	}
	for _, ev := range pending {
		handle(ev)
	}
	for stream.Receive() {
		handle(stream.Event())
	}
	switch {
	case end != nil && !end.GetExited() && !h.deadline.IsZero() && !time.Now().Before(h.deadline):
		// The agent killed the process at its timeout, and its end came
		// before the stream's own deadline broke it (a client slow to
		// notice): it is the timeout all the same.
		h.err = fmt.Errorf("process %d: its timeout passed (%s): %w", h.pid, end.GetError(), errdefs.ErrDeadlineExceeded)
	case end != nil:
		h.mu.Lock()
		res := &CommandResult{
			Stdout:   h.stdout.String(),
			Stderr:   h.stderr.String(),
			ExitCode: int(end.GetExitCode()),
			Error:    end.GetError(),
		}
		h.mu.Unlock()
		h.result = res
		if res.ExitCode != 0 || !end.GetExited() && res.Error != "" {
			h.err = &CommandExitError{CommandResult: *res}
		}
	case h.disconnected.Load():
		h.err = ErrDisconnected
	case stream.Err() != nil:
		h.err = fromConnect(stream.Err())
	default:
		h.err = fmt.Errorf("process %d: stream ended without an end event: %w", h.pid, errdefs.ErrUnavailable)
	}
}

func (h *CommandHandle) data(d *process.ProcessEvent_DataEvent) {
	switch out := d.GetOutput().(type) {
	case *process.ProcessEvent_DataEvent_Stdout:
		s := string(out.Stdout)
		h.mu.Lock()
		h.stdout.add(s, h.keep)
		h.mu.Unlock()
		if h.onStdout != nil {
			h.onStdout(s)
		}
	case *process.ProcessEvent_DataEvent_Stderr:
		s := string(out.Stderr)
		h.mu.Lock()
		h.stderr.add(s, h.keep)
		h.mu.Unlock()
		if h.onStderr != nil {
			h.onStderr(s)
		}
	case *process.ProcessEvent_DataEvent_Pty:
		if h.onPTY != nil {
			h.onPTY(out.Pty)
		}
	}
}

// PID returns the process's id inside the sandbox.
func (h *CommandHandle) PID() uint32 { return h.pid }

// Stdout returns the standard output received so far.
func (h *CommandHandle) Stdout() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stdout.String()
}

// Stderr returns the standard error received so far.
func (h *CommandHandle) Stderr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// Done returns a channel that is closed when the handle stops following
// the process: it ended, or the handle was disconnected.
func (h *CommandHandle) Done() <-chan struct{} { return h.done }

// Wait waits for the process to end and returns its result. A non-zero
// exit returns the result and a *CommandExitError. When the stream broke
// first, the error says why (a command timeout is of class
// errdefs.ErrDeadlineExceeded); after Disconnect it is ErrDisconnected.
// When ctx ends first, Wait returns ctx's error and the handle keeps
// following the process.
func (h *CommandHandle) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-h.done:
		return h.result, h.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Kill kills the process with SIGKILL; Wait then returns its result with a
// *CommandExitError.
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.cmds.Kill(ctx, h.pid)
}

// SendStdin writes data to the process's standard input (see WithStdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return h.cmds.SendStdin(ctx, h.pid, data)
}

// CloseStdin closes the process's standard input.
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return h.cmds.CloseStdin(ctx, h.pid)
}

// Disconnect stops following the process and ends the handle's stream; the
// process keeps running and Commands.Connect can attach to it again.
func (h *CommandHandle) Disconnect() {
	h.disconnected.Store(true)
	h.cancel()
}

// tailBuffer keeps a stream's output, or its last bytes under a bound.
type tailBuffer struct{ b []byte }

// add appends s, keeping everything when keep is 0, the last keep bytes
// when it is positive, and nothing when it is negative.
func (t *tailBuffer) add(s string, keep int) {
	switch {
	case keep < 0:
		return
	case keep == 0:
		t.b = append(t.b, s...)
		return
	}
	t.b = append(t.b, s...)
	if over := len(t.b) - keep; over > 0 {
		// Shift rather than reslice, so the array does not grow for ever.
		t.b = t.b[:copy(t.b, t.b[over:])]
	}
}

func (t *tailBuffer) String() string { return string(t.b) }
