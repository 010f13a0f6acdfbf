package sdk

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/proto/process"
)

// Commands runs and manages processes in a sandbox. Get it as
// Sandbox.Commands. It is safe for concurrent use.
type Commands struct {
	c *conn
}

// CommandResult is the outcome of a command.
type CommandResult struct {
	// Stdout and Stderr are everything the command wrote, as received.
	Stdout string
	Stderr string
	// ExitCode is the command's exit code; -1 when a signal ended it.
	ExitCode int
	// Error is the agent's description of how the process ended, such as
	// "signal: killed"; empty for a normal exit.
	Error string
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
}

// Run runs cmd with bash (`/bin/bash -l -c cmd`, as the E2B SDKs do) and
// waits for it to end. A non-zero exit returns the result and a
// *CommandExitError holding the same result. When ctx ends first, Run kills
// the process and returns ctx's error.
func (c *Commands) Run(ctx context.Context, cmd string, opts ...CommandOption) (*CommandResult, error) {
	h, err := c.Start(ctx, cmd, opts...)
	if err != nil {
		return nil, err
	}
	res, err := h.Wait(ctx)
	if ctx.Err() != nil && res == nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = h.Kill(kctx)
		cancel()
		h.Disconnect()
	}
	return res, err
}

// Start starts cmd with bash, like Run, and returns once the process runs.
// ctx bounds only the start: the process and the handle's stream live on
// after it ends, until the process exits, its timeout (WithTimeout) is up,
// or the handle is killed or disconnected.
func (c *Commands) Start(ctx context.Context, cmd string, opts ...CommandOption) (*CommandHandle, error) {
	o := newCommandOptions(opts)
	msg := &process.StartRequest{
		Process: &process.ProcessConfig{
			Cmd:  "/bin/bash",
			Args: []string{"-l", "-c", cmd},
			Envs: o.envs,
		},
		Stdin: &o.stdin,
	}
	if o.cwd != "" {
		msg.Process.Cwd = &o.cwd
	}
	if o.tag != "" {
		msg.Tag = &o.tag
	}
	h, err := c.start(ctx, msg, o, nil)
	if err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	return h, nil
}

// start opens a Start stream for msg and returns a handle once the process
// runs.
func (c *Commands) start(ctx context.Context, msg *process.StartRequest, o *commandOptions, onPTY func([]byte)) (*CommandHandle, error) {
	sctx, cancel := streamContext(ctx, o.timeout)
	req := newRequest(msg, o.user)
	req.Header().Set(keepaliveHeader, keepaliveInterval)
	stream, err := c.c.process.Start(sctx, req)
	if err != nil {
		cancel()
		return nil, fromConnect(err)
	}
	return follow(ctx, sctx, c, startStream{stream}, cancel, o, onPTY)
}

// Connect attaches to the running process pid, from its next output on.
// WithOnStdout, WithOnStderr and WithTimeout apply; the other options are
// ignored. An unknown pid fails with an error of class errdefs.ErrNotFound.
func (c *Commands) Connect(ctx context.Context, pid uint32, opts ...CommandOption) (*CommandHandle, error) {
	h, err := c.connect(ctx, &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to process %d: %w", pid, err)
	}
	return h, nil
}

// ConnectTag attaches to the running process started with WithTag(tag),
// like Connect.
func (c *Commands) ConnectTag(ctx context.Context, tag string, opts ...CommandOption) (*CommandHandle, error) {
	h, err := c.connect(ctx, &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to process tagged %q: %w", tag, err)
	}
	return h, nil
}

func (c *Commands) connect(ctx context.Context, sel *process.ProcessSelector, opts []CommandOption) (*CommandHandle, error) {
	o := newCommandOptions(opts)
	sctx, cancel := streamContext(ctx, o.timeout)
	req := newRequest(&process.ConnectRequest{Process: sel}, o.user)
	req.Header().Set(keepaliveHeader, keepaliveInterval)
	stream, err := c.c.process.Connect(sctx, req)
	if err != nil {
		cancel()
		return nil, fromConnect(err)
	}
	return follow(ctx, sctx, c, connectStream{stream}, cancel, o, nil)
}

// List returns the processes running in the sandbox, commands and PTYs alike.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.c.process.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", fromConnect(err))
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{
			PID:  p.GetPid(),
			Tag:  p.GetTag(),
			Cmd:  cfg.GetCmd(),
			Args: cfg.GetArgs(),
			Envs: cfg.GetEnvs(),
			Cwd:  cfg.GetCwd(),
		})
	}
	return out, nil
}

// SendStdin writes data to the standard input of process pid, which must
// have been started WithStdin(true).
func (c *Commands) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	_, err := c.c.process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
		Process: pidSelector(pid),
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}},
	}))
	if err != nil {
		return fmt.Errorf("send stdin to process %d: %w", pid, fromConnect(err))
	}
	return nil
}

// CloseStdin closes the standard input of process pid, so that it reads
// end of file.
func (c *Commands) CloseStdin(ctx context.Context, pid uint32) error {
	_, err := c.c.process.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: pidSelector(pid)}))
	if err != nil {
		return fmt.Errorf("close stdin of process %d: %w", pid, fromConnect(err))
	}
	return nil
}

// Kill kills process pid with SIGKILL. Unlike E2B's boolean, a process
// that does not exist (or no longer does) is an error of class
// errdefs.ErrNotFound.
func (c *Commands) Kill(ctx context.Context, pid uint32) error {
	return c.Signal(ctx, pid, syscall.SIGKILL)
}

// Signal sends sig to process pid. The protocol carries SIGTERM and SIGKILL
// only; other signals fail with errdefs.ErrInvalidArgument.
func (c *Commands) Signal(ctx context.Context, pid uint32, sig syscall.Signal) error {
	var s process.Signal
	switch sig {
	case syscall.SIGTERM:
		s = process.Signal_SIGNAL_SIGTERM
	case syscall.SIGKILL:
		s = process.Signal_SIGNAL_SIGKILL
	default:
		return fmt.Errorf("signal %v to process %d: %w: only SIGTERM and SIGKILL can be sent", sig, pid, errdefs.ErrInvalidArgument)
	}
	_, err := c.c.process.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pidSelector(pid), Signal: s}))
	if err != nil {
		return fmt.Errorf("signal %v to process %d: %w", sig, pid, fromConnect(err))
	}
	return nil
}

func pidSelector(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

// streamContext returns the context of a stream that a handle owns: it
// keeps ctx's values but not its cancellation or deadline, and ends after
// timeout (when positive) or when cancel is called. connect-go sends that
// deadline as Connect-Timeout-Ms, which is how the agent learns when to
// kill the process.
func streamContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	sctx := context.WithoutCancel(ctx)
	if timeout > 0 {
		return context.WithTimeout(sctx, timeout)
	}
	return context.WithCancel(sctx)
}
