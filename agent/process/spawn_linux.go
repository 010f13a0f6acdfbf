package process

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

// spawn starts c for req and returns its handle, registered with the
// service and followed by first from its very first byte of output.
//
// The child gets its own session (so its pid is its process group's id
// and signals reach the children it starts), the user's uid, gid and
// supplementary groups, and for PTYs the slave as its controlling
// terminal.
func (s *Service) spawn(c *command, req *pb.StartRequest, first *subscriber) (*handle, error) {
	rp := getReaper(s.log)
	h := newHandle(req, s.log)

	var (
		child   [3]*os.File // the child's stdin, stdout, stderr
		theirs  []*os.File  // child ends, closed here once it has them
		outputs []*os.File
		kinds   []outputKind
	)
	fail := func(err error) (*handle, error) {
		for _, f := range theirs {
			f.Close()
		}
		for _, f := range outputs {
			f.Close()
		}
		if h.stdin != nil {
			h.stdin.Close()
		}
		return nil, err
	}

	if c.pty != nil {
		master, slave, err := openPTY(*c.pty)
		if err != nil {
			return fail(err)
		}
		h.pty = master
		child = [3]*os.File{slave, slave, slave}
		theirs = append(theirs, slave)
		outputs, kinds = append(outputs, master), append(kinds, outPTY)
	} else {
		if c.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("stdin pipe: %w", err))
			}
			child[0], h.stdin = r, w
			theirs = append(theirs, r)
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return fail(err)
			}
			child[0] = null
			theirs = append(theirs, null)
		}
		for i, kind := range []outputKind{outStdout, outStderr} {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("output pipe: %w", err))
			}
			child[1+i] = w
			theirs = append(theirs, w)
			outputs, kinds = append(outputs, r), append(kinds, kind)
		}
	}

	sys := &syscall.SysProcAttr{Setsid: true}
	if c.pty != nil {
		sys.Setctty = true
		sys.Ctty = 0 // a descriptor number in the child: the slave is its stdin
	}
	cred, err := credential(c.user)
	if err != nil {
		return fail(err)
	}
	sys.Credential = cred
	attr := &syscall.ProcAttr{
		Dir: c.dir,
		Env: c.env,
		// Fd puts the child's ends in blocking mode, as programs expect.
		Files: []uintptr{child[0].Fd(), child[1].Fd(), child[2].Fd()},
		Sys:   sys,
	}

	exit := make(chan exitStatus, 1)
	pid, err := rp.spawn(c.path, c.argv, attr, func(st exitStatus) {
		h.markExited()
		exit <- st
	})
	if err != nil {
		return fail(classifyStartError(c, err))
	}
	for _, f := range theirs {
		f.Close()
	}
	h.pid = uint32(pid)
	h.log = s.log.With("pid", pid)
	if f := onStart.Load(); f != nil {
		(*f)()
	}
	h.subscribe(first)
	if !c.unlisted {
		s.add(h)
	}
	h.pumps.Add(len(outputs))
	for i, f := range outputs {
		go h.pump(f, kinds[i])
	}
	go h.supervise(exit, outputs, s.remove)
	return h, nil
}

// credential returns the identity to run as. An agent that is not root
// can only run commands as itself.
func credential(u *identity.User) (*syscall.Credential, error) {
	euid := os.Geteuid()
	if euid == 0 {
		return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}, nil
	}
	if int(u.UID) == euid {
		return nil, nil
	}
	return nil, fmt.Errorf("run as %q: the agent is not root: %w", u.Name, errdefs.ErrPermissionDenied)
}

// classifyStartError gives a failed fork/exec its error class.
func classifyStartError(c *command, err error) error {
	var class error
	var errno syscall.Errno
	switch {
	case !errors.As(err, &errno):
	case errno == syscall.ENOENT, errno == syscall.ENOTDIR, errno == syscall.ENOEXEC,
		errno == syscall.ELOOP, errno == syscall.ENAMETOOLONG, errno == syscall.E2BIG:
		class = errdefs.ErrInvalidArgument
	case errno == syscall.EACCES, errno == syscall.EPERM:
		class = errdefs.ErrPermissionDenied
	case errno == syscall.EAGAIN, errno == syscall.ENOMEM, errno == syscall.EMFILE, errno == syscall.ENFILE:
		class = errdefs.ErrResourceExhausted
	}
	if class == nil {
		return fmt.Errorf("start %q as %q in %q: %w", c.path, c.user.Name, c.dir, err)
	}
	return fmt.Errorf("start %q as %q in %q: %v: %w", c.path, c.user.Name, c.dir, err, class)
}
