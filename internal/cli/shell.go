package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lightbearco/tupper/sdk"
)

type shellOptions struct {
	api  apiOptions
	id   string
	cwd  string
	user string
}

func newShellCmd(g *globals) *cobra.Command {
	o := &shellOptions{}
	cmd := &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell in a sandbox of `tupper serve`",
		Long: `Open an interactive login shell (bash) under a pseudo-terminal in a running
sandbox. The local terminal is put in raw mode, follows window size changes,
and is restored when the shell exits; tupper exits with the shell's code.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.id = args[0]
			return runShell(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cwd, "cwd", "", "working directory (default the user's home)")
	f.StringVarP(&o.user, "user", "u", "", "user to run as (default user; root is allowed)")
	addAPIFlags(cmd, &o.api)
	return cmd
}

func runShell(ctx context.Context, g *globals, o *shellOptions) error {
	// A closed terminal ends the command too, rather than leaving it
	// running in the sandbox with nobody to read it.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	r, sb, err := o.api.sandbox(ctx, o.id)
	if err != nil {
		return err
	}
	// The terminal, when there is one: stdin is what goes raw, and its
	// size (or stdout's) is the shell's.
	inFd, inTTY := terminalFd(g.stdin)
	cols, rows := termSize(g.stdin, g.stdout)
	envs := map[string]string{}
	if t := os.Getenv("TERM"); t != "" && inTTY {
		envs["TERM"] = t
	}
	h, err := sb.PTY.Create(ctx, sdk.PTYOptions{
		Cols: cols, Rows: rows, Cwd: o.cwd, User: o.user, Envs: envs, Timeout: -1,
		OnData: func(b []byte) { g.stdout.Write(b) },
	})
	if err != nil {
		return r.data(ctx, err, o.id)
	}
	if inTTY {
		old, err := term.MakeRaw(inFd)
		if err != nil {
			killQuietly(ctx, h)
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(inFd, old)
	}

	resized, stop := watchResize()
	defer stop()
	go func() {
		for {
			select {
			case <-h.Done():
				return
			case <-resized:
				if c, r, ok := size(g.stdin, g.stdout); ok {
					_ = sb.PTY.Resize(ctx, h.PID(), c, r)
				}
			}
		}
	}()
	go pumpPTY(ctx, g.stdin, sb.PTY, h, !inTTY)

	res, err := h.Wait(ctx)
	if ctx.Err() != nil {
		killQuietly(ctx, h)
		return ctx.Err()
	}
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit):
		return &exitError{code: exitCode(res)}
	case err != nil:
		return r.data(ctx, err, o.id)
	}
	return nil
}

// pumpPTY sends what the user types to the terminal. When input is not a
// terminal, its end is sent on as Ctrl-D, so that a piped script ends the
// shell as it would a local one.
func pumpPTY(ctx context.Context, in io.Reader, pty *sdk.PTY, h *sdk.CommandHandle, eofIsCtrlD bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if pty.SendInput(ctx, h.PID(), buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && eofIsCtrlD {
				_ = pty.SendInput(ctx, h.PID(), []byte{4})
			}
			return
		}
	}
}

func killQuietly(ctx context.Context, h *sdk.CommandHandle) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = h.Kill(kctx)
}

// terminalFd returns the file descriptor of r when r is a terminal.
func terminalFd(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// size reads the window size of the first of files that is a terminal.
func size(files ...any) (cols, rows uint32, ok bool) {
	for _, f := range files {
		if fd, isTTY := terminalFd(f); isTTY {
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				return uint32(w), uint32(h), true
			}
		}
	}
	return 0, 0, false
}

// termSize is size, or 80x24 without a terminal.
func termSize(files ...any) (cols, rows uint32) {
	if c, r, ok := size(files...); ok {
		return c, r
	}
	return 80, 24
}
