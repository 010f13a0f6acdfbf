package wsl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// The argv of every wsl.exe call the backend makes, one function each, so
// that the contract tests can hold them to the letter.

// importArgs registers distro from the tar read on stdin ("-"), with its
// disk (ext4.vhdx) in dir, as a WSL 2 distribution.
func importArgs(distro, dir string) []string {
	return []string{"--import", distro, dir, "-", "--version", "2"}
}

// resizeArgs caps the size of distro's disk, in whole MiB ("MB" is what
// wsl's size strings call them, as .wslconfig's do).
func resizeArgs(distro string, bytes int64) []string {
	mib := (bytes + 1<<20 - 1) >> 20
	return []string{"--manage", distro, "--resize", fmt.Sprintf("%dMB", mib)}
}

// execArgs runs argv in distro as root, from /, with no shell between.
func execArgs(distro string, argv []string) []string {
	return append([]string{"-d", distro, "-u", "root", "--cd", "/", "--exec"}, argv...)
}

// terminateArgs stops every process of distro.
func terminateArgs(distro string) []string { return []string{"--terminate", distro} }

// unregisterArgs removes distro and its disk.
func unregisterArgs(distro string) []string { return []string{"--unregister", distro} }

// The listings. --all includes distributions being installed or removed,
// which a plain --list hides: a half-imported sandbox is still ours to
// clean up.
var (
	listAllArgs     = []string{"--list", "--all", "--quiet"}
	listRunningArgs = []string{"--list", "--running", "--quiet"}
	listVerboseArgs = []string{"--list", "--verbose"}
	versionArgs     = []string{"--version"}
	statusArgs      = []string{"--status"}
)

// cli runs wsl.exe.
type cli struct {
	path string
}

// env is the environment of every wsl.exe the backend starts: the
// backend's own, with WSL_UTF8=1 so that releases that know it print
// UTF-8.
func (c *cli) env() []string {
	return append(os.Environ(), "WSL_UTF8=1")
}

// command returns an unstarted wsl.exe with args.
func (c *cli) command(args []string) *exec.Cmd {
	cmd := exec.Command(c.path, args...)
	cmd.Env = c.env()
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}

// run runs wsl.exe with args, stdin (may be nil), bounded by ctx, and
// returns what it printed, decoded. A failure carries what it printed on
// both streams, which is where wsl says why.
func (c *cli) run(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := c.command(args)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("wsl %s: %w: %w", strings.Join(args, " "), errdefs.ErrUnavailable, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-waited
		return "", fmt.Errorf("wsl %s: %w", strings.Join(args, " "), context.Cause(ctx))
	}
	out := decodeOutput(stdout.Bytes())
	if err != nil {
		msg := strings.TrimSpace(out + "\n" + decodeOutput(stderr.Bytes()))
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out, &cliError{args: args, code: exit.ExitCode(), msg: msg}
		}
		return out, fmt.Errorf("wsl %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// cliError is a wsl.exe that ran and failed. What it printed is for
// people: it is translated, and never matched.
type cliError struct {
	args []string
	code int
	msg  string
}

func (e *cliError) Error() string {
	return fmt.Sprintf("wsl %s: exit status %d: %s", strings.Join(e.args, " "), e.code, e.msg)
}
