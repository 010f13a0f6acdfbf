package sdk

import (
	"context"
	"fmt"
	"maps"
	"time"

	"connectrpc.com/connect"

	"github.com/lightbearco/tupper/proto/process"
)

// PTY runs interactive shells under pseudo-terminals in a sandbox. Get it
// as Sandbox.PTY. It is safe for concurrent use.
type PTY struct {
	cmds *Commands
}

// PTYOptions describes a terminal to create.
type PTYOptions struct {
	// Cols and Rows are the terminal's size.
	Cols, Rows uint32
	// OnData receives the terminal's output as it arrives, on one
	// goroutine of the handle, in order.
	OnData func([]byte)
	// Cwd is the shell's working directory; empty means the user's home.
	Cwd string
	// Envs are added to the shell's environment; TERM is xterm-256color
	// unless Envs sets it.
	Envs map[string]string
	// User is the user the shell runs as; empty means the sandbox's
	// default user.
	User string
	// Timeout bounds the terminal's life, as WithTimeout does for commands:
	// zero means DefaultCommandTimeout (as in E2B), negative means no limit.
	Timeout time.Duration
}

// Create starts `/bin/bash -i -l` under a new pseudo-terminal and returns
// once it runs. The handle's PID names the terminal for SendInput, Resize
// and Kill; its Wait returns when the shell exits.
func (p *PTY) Create(ctx context.Context, opts PTYOptions) (*CommandHandle, error) {
	envs := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(envs, opts.Envs)
	msg := &process.StartRequest{
		Process: &process.ProcessConfig{
			Cmd:  "/bin/bash",
			Args: []string{"-i", "-l"},
			Envs: envs,
		},
		Pty: &process.PTY{Size: &process.PTY_Size{Cols: opts.Cols, Rows: opts.Rows}},
	}
	if opts.Cwd != "" {
		msg.Process.Cwd = &opts.Cwd
	}
	o := &commandOptions{user: opts.User, timeout: opts.Timeout}
	switch {
	case opts.Timeout == 0:
		o.timeout = DefaultCommandTimeout
	case opts.Timeout < 0:
		o.timeout = 0
	}
	h, err := p.cmds.start(ctx, msg, o, opts.OnData)
	if err != nil {
		return nil, fmt.Errorf("create pty: %w", err)
	}
	return h, nil
}

// SendInput writes data to the terminal pid, as typed keys.
func (p *PTY) SendInput(ctx context.Context, pid uint32, data []byte) error {
	_, err := p.cmds.c.process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
		Process: pidSelector(pid),
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}},
	}))
	if err != nil {
		return fmt.Errorf("send input to pty %d: %w", pid, fromConnect(err))
	}
	return nil
}

// Resize changes the size of the terminal pid.
func (p *PTY) Resize(ctx context.Context, pid uint32, cols, rows uint32) error {
	_, err := p.cmds.c.process.Update(ctx, connect.NewRequest(&process.UpdateRequest{
		Process: pidSelector(pid),
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}},
	}))
	if err != nil {
		return fmt.Errorf("resize pty %d: %w", pid, fromConnect(err))
	}
	return nil
}

// Kill kills the terminal pid (its shell) with SIGKILL. A terminal that
// does not exist is an error of class errdefs.ErrNotFound.
func (p *PTY) Kill(ctx context.Context, pid uint32) error {
	return p.cmds.Kill(ctx, pid)
}
