package identity

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// shellOf returns the login shell recorded for name in /etc/passwd, or "".
func shellOf(name string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 7 && fields[0] == name {
			return fields[6]
		}
	}
	return ""
}

// EnsureDefaultUser creates the account DefaultUser (uid and gid 1000, home
// /home/user) when the image lacks it, by appending to /etc/passwd,
// /etc/group and /etc/shadow (when present) and creating the home directory.
// It runs in the agent at boot, as root, on the sandbox's own copy-on-write
// root, so the shared image is never changed.
func EnsureDefaultUser() error {
	if _, err := Lookup(DefaultUser); err == nil {
		return nil
	}
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	home := "/home/" + DefaultUser
	lines := []struct{ file, line string }{
		{"/etc/passwd", fmt.Sprintf("%s:x:1000:1000::%s:%s\n", DefaultUser, home, shell)},
		{"/etc/group", fmt.Sprintf("%s:x:1000:\n", DefaultUser)},
	}
	if _, err := os.Stat("/etc/shadow"); err == nil {
		lines = append(lines, struct{ file, line string }{"/etc/shadow", DefaultUser + ":!:19000:0:99999:7:::\n"})
	}
	for _, l := range lines {
		if err := appendLine(l.file, l.line); err != nil {
			return fmt.Errorf("create user %q: %w", DefaultUser, err)
		}
	}
	if err := os.MkdirAll(home, 0o750); err != nil {
		return fmt.Errorf("create home of %q: %w", DefaultUser, err)
	}
	return filepath.Walk(home, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 1000, 1000)
	})
}

func appendLine(file, line string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	// Keep the file well formed when its last line lacks a newline.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		b := make([]byte, 1)
		if r, err := os.Open(file); err == nil {
			if _, err := r.ReadAt(b, st.Size()-1); err == nil && b[0] != '\n' {
				line = "\n" + line
			}
			r.Close()
		}
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
