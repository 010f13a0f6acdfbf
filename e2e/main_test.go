// Package e2e holds Tupper's end-to-end suites: real clients (the published
// E2B JS SDK, the tupper CLI, raw HTTP) driving real `tupper` processes on
// real runsc. Nothing here is imported by the product.
//
// This file builds the binaries once per test binary; daemon_test.go starts
// `tupper serve` on them.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// e2eBins are the binaries of the run, built once by e2eBinaries. tupper
// and tupper-agent sit in one directory, where tupper finds its agent.
var e2eBins struct {
	once   sync.Once
	dir    string
	tupper string
	agent  string
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBins.dir != "" {
		os.RemoveAll(e2eBins.dir)
	}
	os.Exit(code)
}

// e2eBinaries returns the paths of freshly built, static tupper and
// tupper-agent binaries, in one directory. They are built on first use, so
// a run that skips every test builds nothing.
func e2eBinaries(t testing.TB) (tupper, agent string) {
	t.Helper()
	e2eBins.once.Do(func() {
		dir, err := os.MkdirTemp("", "tupper-e2e-bin-")
		if err != nil {
			e2eBins.err = err
			return
		}
		e2eBins.dir = dir
		for _, b := range []struct{ out, pkg string }{
			{filepath.Join(dir, "tupper"), "./cmd/tupper"},
			{filepath.Join(dir, "tupper-agent"), "./cmd/tupper-agent"},
		} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", b.out, b.pkg)
			cmd.Dir = testutil.ModuleRoot()
			// Static: the agent runs inside images with any libc or
			// none, and a static tupper behaves the same everywhere.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				e2eBins.err = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		e2eBins.tupper = filepath.Join(dir, "tupper")
		e2eBins.agent = filepath.Join(dir, "tupper-agent")
	})
	if e2eBins.err != nil {
		t.Fatalf("build the binaries: %v", e2eBins.err)
	}
	return e2eBins.tupper, e2eBins.agent
}
