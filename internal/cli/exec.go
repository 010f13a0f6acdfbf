package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lightbearco/tupper/sdk"
)

// stdinChunk is the most standard input sent in one SendInput call.
const stdinChunk = 64 << 10

// execTimeoutGrace is how long past --timeout exec waits for the command's
// end before it gives up on the sandbox.
const execTimeoutGrace = 5 * time.Second

// exitTimedOut is exec's exit status when the sandbox did not answer in
// time, as timeout(1)'s.
const exitTimedOut = 124

type execOptions struct {
	api     apiOptions
	id      string
	argv    []string
	stdin   bool
	cwd     string
	user    string
	env     []string
	timeout time.Duration
}

func newExecCmd(g *globals) *cobra.Command {
	o := &execOptions{}
	cmd := &cobra.Command{
		Use:   "exec ID [--stdin] [--cwd DIR] [--user NAME] [--env K=V]... -- CMD [ARG...]",
		Short: "Run a command in a sandbox of `tupper serve`, stream its output, and exit with its code",
		Long: `Run a command in a running sandbox. Its standard output and error are
streamed as they arrive, and tupper exits with the command's exit code.
One argument is run as a bash command line; several are quoted and run as
one command. With --stdin, tupper's standard input is piped to the command
and closed at its end.`,
		Example: `  tupper exec "$id" -- ls -l /home/user
  tupper exec "$id" -- 'echo $HOME | wc -c'
  tar c src | tupper exec --stdin "$id" -- tar x -C /home/user`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 1 {
				return fmt.Errorf("exec takes one sandbox id before --, not %d arguments", n)
			}
			o.id, o.argv = args[0], args[1:]
			return runExec(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.stdin, "stdin", "i", false, "pipe standard input to the command")
	f.StringVar(&o.cwd, "cwd", "", "working directory (default the user's home)")
	f.StringVarP(&o.user, "user", "u", "", "user to run as (default user; root is allowed)")
	f.StringArrayVarP(&o.env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.DurationVar(&o.timeout, "timeout", 0, "kill the command after this long (default: never)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runExec(ctx context.Context, g *globals, o *execOptions) error {
	// A closed terminal ends the command too, rather than leaving it
	// running in the sandbox with nobody to read it.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	env, err := parsePairs("--env", o.env)
	if err != nil {
		return err
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: must not be negative", o.timeout)
	}
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	opts := []sdk.CommandOption{
		sdk.WithTimeout(o.timeout),
		sdk.WithStdin(o.stdin),
		// The output goes straight to our stdout; the handle keeps none.
		sdk.WithMaxOutput(-1),
		sdk.WithOnStdout(func(s string) { io.WriteString(g.stdout, s) }),
		sdk.WithOnStderr(func(s string) { io.WriteString(g.stderr, s) }),
	}
	if len(env) > 0 {
		opts = append(opts, sdk.WithEnv(env))
	}
	if o.cwd != "" {
		opts = append(opts, sdk.WithCwd(o.cwd))
	}
	if o.user != "" {
		opts = append(opts, sdk.WithUser(o.user))
	}
	// --timeout has the agent kill the command; an agent that does not
	// answer (a sandbox frozen, say by `kill -STOP 1`) never would, so
	// the wait is bounded here too, with a grace for the end to arrive.
	waitCtx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.timeout+execTimeoutGrace)
		defer cancel()
	}
	unanswered := func() error {
		fmt.Fprintf(g.stderr, "tupper: the command did not end within --timeout %v (a sandbox that does not answer at all is frozen or overloaded: `tupper kill %s` ends it)\n", o.timeout, o.id)
		return &exitError{code: exitTimedOut}
	}
	h, err := sb.Commands.Start(waitCtx, shellJoin(o.argv), opts...)
	if err != nil {
		if ctx.Err() == nil && (waitCtx.Err() != nil || o.timeout > 0 && sdk.IsDeadlineExceeded(err)) {
			// No pid came back, so nothing can be killed from here; an
			// agent that wakes up ends the command at --timeout itself.
			return unanswered()
		}
		return r.data(ctx, err, o.id)
	}
	stdinErr := make(chan error, 1)
	if o.stdin {
		go func() { stdinErr <- pumpStdin(ctx, g.stdin, h) }()
	}
	res, err := h.Wait(waitCtx)
	if ctx.Err() != nil || waitCtx.Err() != nil {
		// Interrupted, or no answer in time: the command must not
		// outlive us.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.Kill(kctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return unanswered()
	}
	var exit *sdk.CommandExitError
	switch {
	case o.timeout > 0 && sdk.IsDeadlineExceeded(err):
		return unanswered()
	case errors.As(err, &exit):
		if exit.ExitCode < 0 && exit.CommandResult.Error != "" {
			fmt.Fprintf(g.stderr, "tupper: command ended: %s\n", exit.CommandResult.Error)
		}
		return &exitError{code: exitCode(res)}
	case err != nil:
		return r.data(ctx, err, o.id)
	}
	select {
	case err := <-stdinErr:
		// Input the command never read is no failure; input that
		// could not be read on our side is.
		var rerr *readError
		if errors.As(err, &rerr) {
			return err
		}
	default:
	}
	return nil
}

// readError is a failure to read our own standard input.
type readError struct{ err error }

func (e *readError) Error() string { return "read standard input: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// pumpStdin copies in to the command's standard input as it comes, and
// closes the command's input at EOF. It stops when the command ends.
func pumpStdin(ctx context.Context, in io.Reader, h *sdk.CommandHandle) error {
	buf := make([]byte, stdinChunk)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if serr := h.SendStdin(ctx, buf[:n]); serr != nil {
				return serr // most likely the command has ended
			}
		}
		if errors.Is(err, io.EOF) {
			return h.CloseStdin(ctx)
		}
		if err != nil {
			return &readError{err}
		}
		select {
		case <-h.Done():
			return nil
		default:
		}
	}
}
