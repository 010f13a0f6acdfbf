//go:build linux

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hideToken moves the access token out of the environment, where root in
// the sandbox could read it back from /proc/1/environ (unsetting it changes
// only Go's copy), into a pipe, and re-executes the agent without it,
// reading the token from the pipe (--access-token-fd). The pid stays the
// same, so the agent is still PID 1. It returns nil without doing anything
// when there is no token in the environment.
func hideToken() error {
	token, ok := os.LookupEnv(tokenEnv)
	if !ok {
		return nil
	}
	var p [2]int
	// No O_CLOEXEC: the read end must survive the exec. The write end is
	// closed before it.
	if err := unix.Pipe2(p[:], 0); err != nil {
		return fmt.Errorf("hide the access token: %w", err)
	}
	if _, err := unix.Write(p[1], []byte(token)); err != nil {
		return fmt.Errorf("hide the access token: %w", err)
	}
	unix.Close(p[1])
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, tokenEnv+"=") })
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hide the access token: %w", err)
	}
	args := append(slices.Clone(os.Args), "--access-token-fd", strconv.Itoa(p[0]))
	return fmt.Errorf("hide the access token: re-exec: %w", syscall.Exec(exe, args, env))
}
