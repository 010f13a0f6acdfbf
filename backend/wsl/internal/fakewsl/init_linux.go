package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runInit is the sandbox's first process, standing for WSL's init, which
// runs an --exec command as its child rather than as the distribution's
// PID 1: args are the working directory and the command. The command gets
// what fakewsl read on its stdin as its stdin, and the init's environment
// less fakewsl's own variables. The init reaps every orphan, passes
// SIGTERM, SIGINT and SIGHUP on, and exits with the command's status when
// the command exits.
func runInit(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "fakewsl init: want a directory and a command")
		return 127
	}
	cwd, argv := args[0], args[1:]
	stdin, err := base64.StdEncoding.DecodeString(os.Getenv(envStdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakewsl init:", err)
		return 127
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TUPPER_FAKEWSL_") {
			env = append(env, kv)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakewsl init:", err)
		return 127
	}
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Dir: cwd, Env: env, Files: []*os.File{r, os.Stdout, os.Stderr}})
	r.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakewsl init:", err)
		return 127
	}
	// A pipe holds 64 KiB; stdin here is an access token.
	go func() {
		w.Write(stdin)
		w.Close()
	}()
	go func() {
		for sig := range sigc {
			p.Signal(sig)
		}
	}()
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 127
		}
		if pid != p.Pid {
			continue
		}
		if status.Signaled() {
			return 128 + int(status.Signal())
		}
		return status.ExitStatus()
	}
}
