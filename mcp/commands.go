package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lightbearco/tupper/sdk"
)

// maxWait bounds command_output's wait_seconds, below the 60 seconds after
// which common clients give up on a call.
const maxWait = 50 * time.Second

type runCommandIn struct {
	Sandbox        string            `json:"sandbox" jsonschema:"Id of the sandbox (from create_sandbox or list_sandboxes)"`
	Command        string            `json:"command" jsonschema:"Shell command, run as bash -l -c COMMAND"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"Working directory; default the user's home"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"Environment variables added for this command"`
	User           string            `json:"user,omitempty" jsonschema:"User to run as: user (the default) or root"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"Kill the command after this many seconds; default 50 in the foreground and no limit in the background"`
	Background     bool              `json:"background,omitempty" jsonschema:"Return a pid at once and keep the command running; read its output with command_output"`
}

type runCommandOut struct {
	PID        int    `json:"pid" jsonschema:"The command's process id in the sandbox"`
	Background bool   `json:"background" jsonschema:"Whether the command runs on in the background"`
	ExitCode   *int   `json:"exit_code,omitempty" jsonschema:"Exit code of a foreground command; -1 when a signal ended it"`
	Error      string `json:"error,omitempty" jsonschema:"How the command ended when not by a normal exit, such as signal: killed"`
	Stdout     string `json:"stdout" jsonschema:"Standard output, cut to the output limit with a truncation marker"`
	Stderr     string `json:"stderr" jsonschema:"Standard error, cut to the output limit with a truncation marker"`
}

type commandOutputIn struct {
	Sandbox      string `json:"sandbox" jsonschema:"Id of the sandbox"`
	PID          int    `json:"pid" jsonschema:"Process id that run_command returned"`
	StdoutOffset int64  `json:"stdout_offset,omitempty" jsonschema:"Return stdout from this byte offset on (next_stdout_offset of the previous call); default 0"`
	StderrOffset int64  `json:"stderr_offset,omitempty" jsonschema:"Return stderr from this byte offset on (next_stderr_offset of the previous call); default 0"`
	WaitSeconds  int    `json:"wait_seconds,omitempty" jsonschema:"Wait up to this many seconds (at most 50) for the command to end before answering; default 0"`
}

type commandOutputOut struct {
	PID              int    `json:"pid" jsonschema:"The command's process id"`
	Running          bool   `json:"running" jsonschema:"Whether the command is still running"`
	ExitCode         *int   `json:"exit_code,omitempty" jsonschema:"Exit code once the command ended; -1 when a signal ended it"`
	Error            string `json:"error,omitempty" jsonschema:"How the command ended when not by a normal exit"`
	Stdout           string `json:"stdout" jsonschema:"Standard output from stdout_offset on, cut to the output limit"`
	Stderr           string `json:"stderr" jsonschema:"Standard error from stderr_offset on, cut to the output limit"`
	NextStdoutOffset int64  `json:"next_stdout_offset" jsonschema:"Pass as stdout_offset to read on from here"`
	NextStderrOffset int64  `json:"next_stderr_offset" jsonschema:"Pass as stderr_offset to read on from here"`
	StdoutBytes      int64  `json:"stdout_bytes" jsonschema:"Bytes of standard output written so far"`
	StderrBytes      int64  `json:"stderr_bytes" jsonschema:"Bytes of standard error written so far"`
}

type sendStdinIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox"`
	PID     int    `json:"pid" jsonschema:"Process id of a background command"`
	Data    string `json:"data,omitempty" jsonschema:"Text to write to the command's standard input; add a newline to end a line"`
	EOF     bool   `json:"eof,omitempty" jsonschema:"Close standard input after writing, so that the command reads end of file"`
}

type sendStdinOut struct {
	PID       int  `json:"pid" jsonschema:"The process written to"`
	BytesSent int  `json:"bytes_sent" jsonschema:"Bytes written"`
	Closed    bool `json:"closed" jsonschema:"Whether standard input was closed"`
}

type pidIn struct {
	Sandbox string `json:"sandbox" jsonschema:"Id of the sandbox"`
	PID     int    `json:"pid" jsonschema:"Process id to kill"`
}

type killCommandOut struct {
	PID      int    `json:"pid" jsonschema:"The process that was killed"`
	Killed   bool   `json:"killed" jsonschema:"Always true: failures are errors"`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"Exit code of a background command once it ended"`
	Error    string `json:"error,omitempty" jsonschema:"How the command ended"`
}

func (t *tools) registerCommands(s *mcpsdk.Server) {
	addTool(s, t, &mcpsdk.Tool{
		Name:  "run_command",
		Title: "Run a command",
		Description: "Run a shell command in a sandbox and return its exit code, stdout and stderr. " +
			"With background: true it returns a pid at once; then use command_output, send_stdin and kill_command.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, OpenWorldHint: yes},
	}, nil, t.runCommand)
	addTool(s, t, &mcpsdk.Tool{
		Name:  "command_output",
		Title: "Read a background command's output",
		Description: "Return what a background command wrote so far, and whether it ended with which exit code. " +
			"Page with the offsets; wait_seconds waits for the end.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no},
	}, nil, t.commandOutput)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "send_stdin",
		Title:       "Send input to a command",
		Description: "Write text to the standard input of a background command, and optionally close it.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no},
	}, nil, t.sendStdin)
	addTool(s, t, &mcpsdk.Tool{
		Name:        "kill_command",
		Title:       "Kill a command",
		Description: "Kill a running process in a sandbox (SIGKILL).",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no},
	}, nil, t.killCommand)
}

// commandOptions turns a call's settings into SDK options.
func commandOptions(cwd, user string, env map[string]string, timeout time.Duration) []sdk.CommandOption {
	opts := []sdk.CommandOption{sdk.WithTimeout(timeout)}
	if cwd != "" {
		opts = append(opts, sdk.WithCwd(cwd))
	}
	if user != "" {
		opts = append(opts, sdk.WithUser(user))
	}
	if len(env) > 0 {
		opts = append(opts, sdk.WithEnv(env))
	}
	return opts
}

func (t *tools) runCommand(ctx context.Context, in runCommandIn) (*mcpsdk.CallToolResult, runCommandOut, error) {
	var out runCommandOut
	if strings.TrimSpace(in.Command) == "" {
		return nil, out, errArgument("command is empty")
	}
	if in.TimeoutSeconds < 0 {
		return nil, out, errArgument("timeout_seconds must not be negative")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if in.Background {
		return t.startBackground(ctx, sb, in, timeout)
	}
	if timeout == 0 {
		timeout = DefaultCommandTimeout
	}
	res, err := t.runForeground(ctx, sb, in.Command, commandOptions(in.Cwd, in.User, in.Env, timeout), timeout)
	if err != nil {
		return nil, out, err
	}
	out = runCommandOut{PID: res.pid, ExitCode: &res.ExitCode, Error: res.Error}
	out.Stdout, _ = capHeadTail(res.Stdout, t.cfg.OutputLimit)
	out.Stderr, _ = capHeadTail(res.Stderr, t.cfg.OutputLimit)
	return textResult(renderResult(res.ExitCode, res.Error, out.Stdout, out.Stderr)), out, nil
}

// foregroundResult is a finished command.
type foregroundResult struct {
	sdk.CommandResult
	pid int
}

// runForeground runs command and waits for it to end. A non-zero exit is
// a result, not an error; running out of time is an error that carries
// the partial output.
func (t *tools) runForeground(ctx context.Context, sb *sdk.Sandbox, command string, opts []sdk.CommandOption, timeout time.Duration) (*foregroundResult, error) {
	h, err := sb.Commands.Start(ctx, command, opts...)
	if err != nil {
		return nil, explain(ctx, "start the command", sb.ID(), err)
	}
	res, err := h.Wait(ctx)
	if ctx.Err() != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = h.Kill(kctx)
		cancel()
		h.Disconnect()
		return nil, ctx.Err()
	}
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit):
		res = &exit.CommandResult
	case sdk.IsDeadlineExceeded(err):
		stdout, _ := capHeadTail(h.Stdout(), t.cfg.OutputLimit)
		stderr, _ := capHeadTail(h.Stderr(), t.cfg.OutputLimit)
		return nil, fmt.Errorf("the command timed out after %v and was killed: rerun it with a larger timeout_seconds, or with background: true and poll command_output\n%s",
			timeout, renderOutput(stdout, stderr))
	case err != nil:
		return nil, explain(ctx, "run the command", sb.ID(), err)
	}
	return &foregroundResult{CommandResult: *res, pid: int(h.PID())}, nil
}

func (t *tools) startBackground(ctx context.Context, sb *sdk.Sandbox, in runCommandIn, timeout time.Duration) (*mcpsdk.CallToolResult, runCommandOut, error) {
	var out runCommandOut
	bc, err := t.bg.prepare(sb.ID(), in.Command)
	if err != nil {
		return nil, out, err
	}
	opts := append(commandOptions(in.Cwd, in.User, in.Env, timeout),
		sdk.WithStdin(true), sdk.WithOnStdout(bc.stdout.Write), sdk.WithOnStderr(bc.stderr.Write),
		// The capped buffers above keep the output; the handle keeps none.
		sdk.WithMaxOutput(-1))
	h, err := sb.Commands.Start(ctx, in.Command, opts...)
	if err != nil {
		return nil, out, explain(ctx, "start the command", sb.ID(), err)
	}
	t.bg.follow(sb.ID(), bc, h)
	out = runCommandOut{PID: int(h.PID()), Background: true, Stdout: "", Stderr: ""}
	return textResult(fmt.Sprintf("started pid %d in the background in sandbox %s: read its output with command_output (sandbox %q, pid %d); send_stdin writes to it, kill_command stops it",
		out.PID, sb.ID(), sb.ID(), out.PID)), out, nil
}

func checkPID(pid int) error {
	if pid <= 0 || pid > 1<<32-1 {
		return errArgument("pid %d is not a process id: pass the pid that run_command returned", pid)
	}
	return nil
}

func (t *tools) commandOutput(ctx context.Context, in commandOutputIn) (*mcpsdk.CallToolResult, commandOutputOut, error) {
	var out commandOutputOut
	if err := checkPID(in.PID); err != nil {
		return nil, out, err
	}
	if in.StdoutOffset < 0 || in.StderrOffset < 0 || in.WaitSeconds < 0 {
		return nil, out, errArgument("offsets and wait_seconds must not be negative")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	pid := uint32(in.PID)
	bc := t.bg.get(sb.ID(), pid)
	if bc == nil {
		if bc, err = t.attach(ctx, sb, pid); err != nil {
			return nil, out, err
		}
	}
	if in.WaitSeconds > 0 {
		wait := min(time.Duration(in.WaitSeconds)*time.Second, maxWait)
		timer := time.NewTimer(wait)
		select {
		case <-bc.done:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, out, ctx.Err()
		}
		timer.Stop()
	}
	// Whether it ended is read before the output, so that an ended
	// command's output is complete.
	ended := bc.ended()
	out = commandOutputOut{PID: in.PID, Running: !ended}
	if ended {
		code := bc.exitCode
		out.ExitCode, out.Error = &code, bc.errText
	}
	out.Stdout, out.NextStdoutOffset, out.StdoutBytes = t.page(bc.stdout, in.StdoutOffset, "stdout_offset")
	out.Stderr, out.NextStderrOffset, out.StderrBytes = t.page(bc.stderr, in.StderrOffset, "stderr_offset")

	var b strings.Builder
	switch {
	case !ended:
		fmt.Fprintf(&b, "pid %d is running", in.PID)
	case out.Error != "":
		fmt.Fprintf(&b, "pid %d ended: exit code %d (%s)", in.PID, *out.ExitCode, out.Error)
	default:
		fmt.Fprintf(&b, "pid %d ended: exit code %d", in.PID, *out.ExitCode)
	}
	if bc.attached {
		b.WriteString("\n(attached after it started: earlier output is not available)")
	}
	fmt.Fprintf(&b, "\nnext_stdout_offset=%d next_stderr_offset=%d", out.NextStdoutOffset, out.NextStderrOffset)
	if o := renderOutput(out.Stdout, out.Stderr); o != "" {
		b.WriteString("\n" + o)
	}
	return textResult(b.String()), out, nil
}

// page reads one stream of a background command from offset on, with a
// marker when bytes were dropped or more remain. It returns the text, the
// offset to read on from and the stream's size so far.
func (t *tools) page(buf *tailBuffer, offset int64, param string) (string, int64, int64) {
	data, from, total := buf.read(offset, t.cfg.OutputLimit)
	shown := int64(len(data))
	next := from + shown
	if from > offset {
		data = fmt.Sprintf("[dropped: bytes %d to %d are no longer kept; the server keeps the last %d bytes]\n", offset, from, buf.keep) + data
	}
	if next < total {
		data += "\n" + truncationMarker(shown, total-from, "call command_output again with "+param+"="+strconv.FormatInt(next, 10)+" for more")
	}
	return data, next, total
}

// attach starts following a process the server does not follow yet, such
// as one a previous server started: its output from now on is kept.
func (t *tools) attach(ctx context.Context, sb *sdk.Sandbox, pid uint32) (*bgCommand, error) {
	bc, err := t.bg.prepare(sb.ID(), "")
	if err != nil {
		return nil, err
	}
	bc.attached = true
	h, err := sb.Commands.Connect(ctx, pid, sdk.WithTimeout(0), sdk.WithOnStdout(bc.stdout.Write), sdk.WithOnStderr(bc.stderr.Write))
	if err != nil {
		if sdk.IsNotFound(err) {
			return nil, fmt.Errorf("no process with pid %d runs in sandbox %q: it ended before this server followed it, or never ran; start commands with run_command and background: true", pid, sb.ID())
		}
		return nil, explain(ctx, "attach to the process", sb.ID(), err)
	}
	t.bg.follow(sb.ID(), bc, h)
	return bc, nil
}

func (t *tools) sendStdin(ctx context.Context, in sendStdinIn) (*mcpsdk.CallToolResult, sendStdinOut, error) {
	var out sendStdinOut
	if err := checkPID(in.PID); err != nil {
		return nil, out, err
	}
	if in.Data == "" && !in.EOF {
		return nil, out, errArgument("pass data to write, eof: true to close standard input, or both")
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	pid := uint32(in.PID)
	notOpen := func(err error) error {
		if sdk.IsNotFound(err) {
			return fmt.Errorf("no process with pid %d runs in sandbox %q: it may have ended (see command_output)", pid, sb.ID())
		}
		return explain(ctx, fmt.Sprintf("write to the standard input of pid %d (only background commands of run_command keep it open)", pid), sb.ID(), err)
	}
	if in.Data != "" {
		if err := sb.Commands.SendStdin(ctx, pid, []byte(in.Data)); err != nil {
			return nil, out, notOpen(err)
		}
	}
	if in.EOF {
		if err := sb.Commands.CloseStdin(ctx, pid); err != nil {
			return nil, out, notOpen(err)
		}
	}
	out = sendStdinOut{PID: in.PID, BytesSent: len(in.Data), Closed: in.EOF}
	text := fmt.Sprintf("sent %d bytes to pid %d", out.BytesSent, in.PID)
	if in.EOF {
		text += " and closed its standard input"
	}
	return textResult(text + ": read its output with command_output"), out, nil
}

func (t *tools) killCommand(ctx context.Context, in pidIn) (*mcpsdk.CallToolResult, killCommandOut, error) {
	var out killCommandOut
	if err := checkPID(in.PID); err != nil {
		return nil, out, err
	}
	sb, err := t.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, out, err
	}
	pid := uint32(in.PID)
	if err := sb.Commands.Kill(ctx, pid); err != nil {
		if sdk.IsNotFound(err) {
			return nil, out, fmt.Errorf("no process with pid %d runs in sandbox %q: it has ended already (command_output tells how)", pid, sb.ID())
		}
		return nil, out, explain(ctx, fmt.Sprintf("kill pid %d", pid), sb.ID(), err)
	}
	out = killCommandOut{PID: in.PID, Killed: true}
	text := fmt.Sprintf("killed pid %d", pid)
	if bc := t.bg.get(sb.ID(), pid); bc != nil {
		// Report how it ended, which takes the stream a moment.
		timer := time.NewTimer(5 * time.Second)
		select {
		case <-bc.done:
			code := bc.exitCode
			out.ExitCode, out.Error = &code, bc.errText
			text += fmt.Sprintf(": exit code %d", code)
			if bc.errText != "" {
				text += " (" + bc.errText + ")"
			}
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	return textResult(text), out, nil
}

// renderResult is the text of a finished command.
func renderResult(exitCode int, errText, stdout, stderr string) string {
	s := fmt.Sprintf("exit code: %d", exitCode)
	if errText != "" {
		s += " (" + errText + ")"
	}
	if o := renderOutput(stdout, stderr); o != "" {
		s += "\n" + o
	}
	return s
}

// renderOutput shows the non-empty streams under headers.
func renderOutput(stdout, stderr string) string {
	var parts []string
	if stdout != "" {
		parts = append(parts, "--- stdout ---\n"+strings.TrimSuffix(stdout, "\n"))
	}
	if stderr != "" {
		parts = append(parts, "--- stderr ---\n"+strings.TrimSuffix(stderr, "\n"))
	}
	return strings.Join(parts, "\n")
}
