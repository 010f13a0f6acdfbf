package apple

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// cli runs Apple's `container` CLI.
type cli struct {
	path string
}

// maxStderr is how much of a failed command's stderr its error quotes.
const maxStderr = 2 << 10

// CommandError is a `container` command that failed: what ran, how it
// ended, and what it said on stderr.
type CommandError struct {
	Args   []string
	Err    error // the *exec.ExitError, or why it did not run
	Stderr string
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("`container %s`: %v", strings.Join(e.Args, " "), e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// Unwrap makes a failed command errdefs.ErrUnavailable, the class of a
// dependency that did not do its part, and keeps a context's error.
func (e *CommandError) Unwrap() []error { return []error{e.Err, errdefs.ErrUnavailable} }

// run runs `container args...` and returns its stdout. A command that
// fails returns a *CommandError.
func (c *cli) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return stdout.Bytes(), &CommandError{Args: args, Err: err, Stderr: tail(stderr.String(), maxStderr)}
	}
	return stdout.Bytes(), nil
}

// containers returns every container `container list --all` shows.
func (c *cli) containers(ctx context.Context) ([]record, error) {
	out, err := c.run(ctx, "list", "--all", "--format", "json")
	if err != nil {
		return nil, err
	}
	recs, err := parseRecords(out)
	if err != nil {
		return nil, fmt.Errorf("read the output of `container list --all --format json`: %w", err)
	}
	return recs, nil
}

// inspect returns what `container inspect id` shows.
func (c *cli) inspect(ctx context.Context, id string) ([]record, error) {
	out, err := c.run(ctx, "inspect", id)
	if err != nil {
		return nil, err
	}
	recs, err := parseRecords(out)
	if err != nil {
		return nil, fmt.Errorf("read the output of `container inspect %s`: %w", id, err)
	}
	return recs, nil
}

// tail returns the last n bytes of s, trimmed, marked when cut.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
