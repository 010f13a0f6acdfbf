package process

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
	pb "github.com/lightbearco/tupper/proto/process"
)

const (
	// defaultPath is the search path of commands whose base environment
	// carries none: Debian's for root, which also suits other users.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// defaultTerm is TERM for PTY processes whose environment sets none;
	// xterm.js, which the SDKs' terminals use, understands it.
	defaultTerm = "xterm-256color"
	// fallbackShell replaces bash in images that lack it (see resolveExecutable).
	fallbackShell = "/bin/sh"
)

// Default PTY size when a request gives a zero dimension.
const (
	defaultCols = 80
	defaultRows = 24
)

// command is a Start request resolved against the sandbox: everything the
// platform spawner needs and nothing it has to look up.
type command struct {
	path  string   // absolute path of the executable
	argv  []string // argv[0] is the command as requested (or the fallback shell)
	env   []string // KEY=value
	dir   string   // absolute, existing working directory
	user  *identity.User
	pty   *winsize // nil: pipes
	stdin bool     // a writable stdin pipe; false: /dev/null (ignored with a PTY)
	// unlisted keeps the process out of the service's table: List,
	// Connect and the other RPCs do not see it (the agent's own checks).
	unlisted bool
}

// winsize is a terminal size in cells.
type winsize struct{ cols, rows uint16 }

// resolve checks req and resolves it for user u.
func (s *Service) resolve(u *identity.User, req *pb.StartRequest) (*command, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return nil, fmt.Errorf("process.cmd is empty: %w", errdefs.ErrInvalidArgument)
	}
	c := &command{user: u, stdin: req.Stdin == nil || req.GetStdin()}
	if p := req.GetPty(); p != nil {
		c.pty = &winsize{cols: clampSize(p.GetSize().GetCols(), defaultCols), rows: clampSize(p.GetSize().GetRows(), defaultRows)}
	}

	dir := u.Home
	if w := s.cfg.DefaultWorkdir; w != "" {
		if st, err := os.Stat(w); err == nil && st.IsDir() {
			dir = w
		}
	}
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		var err error
		if dir, err = u.ResolvePath(cfg.GetCwd()); err != nil {
			return nil, fmt.Errorf("cwd: %w", err)
		}
	} else if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		// Accounts like nobody have a home that does not exist; a command
		// that asked for no directory should still run.
		dir = "/"
	}
	switch st, err := os.Stat(dir); {
	case err != nil:
		return nil, fmt.Errorf("cwd %q does not exist: %w", dir, errdefs.ErrInvalidArgument)
	case !st.IsDir():
		return nil, fmt.Errorf("cwd %q is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	c.dir = dir

	c.env = buildEnv(*s.env.Load(), u, cfg.GetEnvs(), c.pty != nil)
	exe, argv0, err := resolveExecutable(cfg.GetCmd(), lookupEnv(c.env, "PATH"), dir)
	if err != nil {
		return nil, err
	}
	c.path = exe
	c.argv = append([]string{argv0}, cfg.GetArgs()...)
	return c, nil
}

func clampSize(v uint32, def uint16) uint16 {
	switch {
	case v == 0:
		return def
	case v > 0xffff:
		return 0xffff
	}
	return uint16(v)
}

// buildEnv layers a command's environment, later layers winning: a default
// PATH, the agent's base environment, the user's identity (HOME, USER,
// LOGNAME, SHELL — these follow the user even when the base sets them),
// TERM for PTYs unless already set, and finally the request's envs.
func buildEnv(base []string, u *identity.User, req map[string]string, pty bool) []string {
	var keys []string
	vals := make(map[string]string)
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	set("PATH", defaultPath)
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			set(k, v)
		}
	}
	shell := u.Shell
	if shell == "" {
		shell = fallbackShell
	}
	set("HOME", u.Home)
	set("USER", u.Name)
	set("LOGNAME", u.Name)
	set("SHELL", shell)
	if _, ok := vals["TERM"]; pty && !ok {
		set("TERM", defaultTerm)
	}
	for _, k := range slices.Sorted(maps.Keys(req)) {
		set(k, req[k])
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// lookupEnv returns the value of key in env, or "".
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// resolveExecutable finds cmd the way a shell would, with the command's
// own PATH and working directory rather than the agent's. It returns the
// executable's path and the argv[0] to run it with.
//
// The SDKs run every command as "/bin/bash -l -c <cmd>". Images without
// bash (busybox, distroless-with-shell) get /bin/sh with the same
// arguments instead of an error: dash and busybox ash both accept -l and
// -c, and a login sh reads /etc/profile much as bash would.
func resolveExecutable(cmd, pathEnv, dir string) (exe, argv0 string, err error) {
	exe, err = lookPath(cmd, pathEnv, dir)
	if err == nil {
		return exe, cmd, nil
	}
	if path.Base(cmd) == "bash" {
		if sh, shErr := lookPath(fallbackShell, pathEnv, dir); shErr == nil {
			return sh, fallbackShell, nil
		}
	}
	return "", "", err
}

// lookPath resolves cmd: names with a slash relative to dir, bare names
// through pathEnv.
func lookPath(cmd, pathEnv, dir string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("executable %q: %w", cmd, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, cmd)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH %q: %w", cmd, pathEnv, errdefs.ErrInvalidArgument)
}

func isExecutable(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("does not exist: %w", errdefs.ErrInvalidArgument)
	case st.IsDir():
		return fmt.Errorf("is a directory: %w", errdefs.ErrInvalidArgument)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("is not executable: %w", errdefs.ErrPermissionDenied)
	}
	return nil
}
