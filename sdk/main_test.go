package sdk_test

import (
	"os"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

func TestMain(m *testing.M) {
	// The in-process agent runs commands with `bash -l`, as the SDKs ask:
	// the host's startup files must not slow or change them.
	if code, parent := testutil.HermeticLoginShells(); parent {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestLoginShellsAreHermetic checks that the agent's login shells in these
// tests read empty startup files, whatever the host's hold.
func TestLoginShellsAreHermetic(t *testing.T) {
	sb := localSandbox(t)
	res, err := sb.Commands.Run(testContext(t), `cat /etc/profile /etc/bash.bashrc ~/.profile ~/.bash_profile ~/.bashrc 2>/dev/null | wc -c`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "0\n" {
		t.Errorf("the login shells' startup files hold %s bytes, want none", res.Stdout)
	}
}
