package process

import (
	"log/slog"
	"os"
	"syscall"

	"github.com/lightbearco/tupper/agent/identity"
)

// Daemon describes a long-lived process of the agent's own, such as the
// code interpreter's server.
type Daemon struct {
	// Path is the program and Args its whole argv (Args[0] included).
	Path string
	Args []string
	// User is who it runs as; Env is the base environment, to which the
	// user's HOME, USER, LOGNAME and SHELL are added as for commands.
	User *identity.User
	Env  []string
	// Dir is its working directory; empty means the user's home.
	Dir string
	// Files are its descriptors from 3 on.
	Files []*os.File
	// Stderr receives its standard output and error; nil discards them.
	Stderr *os.File
}

// StartDaemon starts d through the agent's reaper (a child started any
// other way would lose its exit status to it) and returns its pid and a
// channel that closes when it has exited. The daemon gets a session of its
// own, so that signals to it reach what it starts.
func StartDaemon(log *slog.Logger, d Daemon) (int, <-chan struct{}, error) {
	cred, err := credential(d.User)
	if err != nil {
		return 0, nil, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	defer null.Close()
	out := d.Stderr
	if out == nil {
		out = null
	}
	files := []uintptr{null.Fd(), out.Fd(), out.Fd()}
	for _, f := range d.Files {
		files = append(files, f.Fd())
	}
	dir := d.Dir
	if dir == "" {
		dir = d.User.Home
	}
	exited := make(chan struct{})
	pid, err := getReaper(log).spawn(d.Path, d.Args, &syscall.ProcAttr{
		Dir:   dir,
		Env:   buildEnv(d.Env, d.User, nil, false),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: cred},
	}, func(exitStatus) { close(exited) })
	if err != nil {
		return 0, nil, err
	}
	return pid, exited, nil
}
