package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// hermeticEnv marks a test binary that HermeticLoginShells re-ran in a
// private mount namespace: "1" before its startup files are masked, "done"
// after (so the binary's own re-runs of itself do not mask them again).
const hermeticEnv = "TUPPER_TEST_HERMETIC_SHELLS"

// loginFiles are the startup files bash and sh read as login (and, for
// .bashrc, interactive) shells, relative to a home directory, and the
// system-wide ones.
var (
	homeLoginFiles   = []string{".profile", ".bash_profile", ".bash_login", ".bashrc", ".bash_logout"}
	systemLoginFiles = []string{"/etc/profile", "/etc/bash.bashrc", "/etc/bash.bash_logout"}
)

// HermeticLoginShells makes the login shells that a test binary's commands
// run (the agent on the host runs `bash -l`, as the SDKs ask) read none of
// the host's startup files: the host's /etc/profile, ~/.profile or ~/.bashrc
// can be slow (a stale `pyenv rehash` lock makes every one wait 60 s), print
// things, or change PATH, none of which a test may depend on.
//
// Call it first in TestMain. As root, it runs the test binary again in a
// private mount namespace where those files (for every home in /etc/passwd)
// are empty, and returns that run's exit code with parent true: TestMain
// exits with it. In the run that is to execute the tests it masks the files
// and returns parent false. Where it cannot (not root, no mount namespaces)
// it returns parent false and the tests see the host's files, as before;
// tests that start commands as other users need root anyway.
func HermeticLoginShells() (code int, parent bool) {
	switch os.Getenv(hermeticEnv) {
	case "done":
		return 0, false
	case "1":
		if err := maskLoginFiles(); err != nil {
			fmt.Fprintf(os.Stderr, "testutil: masking the host's login-shell files: %v\n", err)
			return 1, true
		}
		os.Setenv(hermeticEnv, "done")
		return 0, false
	}
	if os.Geteuid() != 0 {
		return 0, false
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testutil: cannot re-run the test binary (%v); its shells read the host's startup files\n", err)
		return 0, false
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), hermeticEnv+"=1")
	// Go makes the new namespace's mounts private (MS_REC|MS_PRIVATE)
	// before exec, so nothing done in it reaches the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), true
	case errors.As(err, &exit):
		fmt.Fprintf(os.Stderr, "testutil: the test binary ended: %v\n", err)
		return 2, true
	}
	fmt.Fprintf(os.Stderr, "testutil: cannot re-run the test binary in a mount namespace (%v); its shells read the host's startup files\n", err)
	return 0, false
}

// maskLoginFiles bind-mounts an empty file over every login-shell startup
// file that exists. It must run in a private mount namespace.
func maskLoginFiles() error {
	empty, err := os.CreateTemp("", "tupper-empty-profile-")
	if err != nil {
		return err
	}
	empty.Close()
	// Every user's shell reads it (CreateTemp made it 0600).
	if err := os.Chmod(empty.Name(), 0o644); err != nil {
		return err
	}
	// The mounts keep the file's inode; its name can go at once.
	defer os.Remove(empty.Name())
	targets := append([]string(nil), systemLoginFiles...)
	for _, home := range homes() {
		for _, f := range homeLoginFiles {
			targets = append(targets, filepath.Join(home, f))
		}
	}
	seen := map[string]bool{}
	for _, p := range targets {
		if seen[p] {
			continue
		}
		seen[p] = true
		// Missing files need no mask, and empty ones none either (they
		// may be masked already: the test binary may run itself again
		// with the environment it started with).
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			continue
		}
		if err := syscall.Mount(empty.Name(), p, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind an empty file over %s: %w", p, err)
		}
	}
	return nil
}

// homes lists the home directories of /etc/passwd, and $HOME.
func homes() []string {
	var hs []string
	if h := os.Getenv("HOME"); h != "" {
		hs = append(hs, h)
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return hs
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Split(sc.Text(), ":"); len(fields) >= 6 && filepath.IsAbs(fields[5]) {
			hs = append(hs, fields[5])
		}
	}
	return hs
}
