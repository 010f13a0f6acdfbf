package image_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// checkLoginShell checks, in the tree root of a built image, that a login
// shell sets what Debian's sets (PATH for root and for the user) and that
// bash's does it without running a program: every fork costs milliseconds
// in a gVisor sandbox and every SDK command is a "bash -l -c". dash (sh -l)
// has no $EUID and still asks id.
func checkLoginShell(t *testing.T, root string) {
	t.Helper()
	// Stand-ins for id and mesg note that they ran and then do their work.
	// /usr/local/bin comes first both on the PATH the shell starts with and
	// on the ones /etc/profile sets.
	for _, name := range []string{"id", "mesg"} {
		p := filepath.Join(root, "usr/local/bin", name)
		script := "#!/bin/sh\ntouch /tmp/ran-" + name + "\nexec /usr/bin/" + name + ` "$@"` + "\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	const (
		rootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		userPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
	)
	tests := []struct {
		name     string
		userspec string
		home     string
		shell    string
		wantPath string
		wantRan  []string
	}{
		{name: "bash as root", userspec: "0:0", home: "/root", shell: "/bin/bash", wantPath: rootPath},
		{name: "bash as user", userspec: "1000:1000", home: "/home/user", shell: "/bin/bash", wantPath: userPath},
		{name: "sh as root", userspec: "0:0", home: "/root", shell: "/bin/sh", wantPath: rootPath, wantRan: []string{"id"}},
		{name: "sh as user", userspec: "1000:1000", home: "/home/user", shell: "/bin/sh", wantPath: userPath, wantRan: []string{"id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"id", "mesg"} {
				os.Remove(filepath.Join(root, "tmp", "ran-"+name))
			}
			// Stdin is not a terminal, as for every command the agent runs
			// without a PTY.
			cmd := exec.Command("chroot", "--userspec="+tt.userspec, root,
				"/usr/bin/env", "-i", "HOME="+tt.home, "PATH=/usr/local/bin:/usr/bin:/bin",
				tt.shell, "-l", "-c", `echo "$PATH"`)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s -l: %v: %s", tt.shell, err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.wantPath {
				t.Errorf("PATH = %q, want %q", got, tt.wantPath)
			}
			var ran []string
			for _, name := range []string{"id", "mesg"} {
				if _, err := os.Stat(filepath.Join(root, "tmp", "ran-"+name)); err == nil {
					ran = append(ran, name)
				}
			}
			if diff := cmp.Diff(tt.wantRan, ran, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("programs the login shell ran (-want +got):\n%s", diff)
			}
		})
	}
}
