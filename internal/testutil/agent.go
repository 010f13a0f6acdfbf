package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// AgentBinary returns the path of a static tupper-agent binary for tests.
// $TUPPER_AGENT wins when set (the test script builds it once for every
// package); otherwise the agent is built once per test binary (see
// StaticBinary).
func AgentBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TUPPER_AGENT"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TUPPER_AGENT=%s: %v", p, err)
		}
		return p
	}
	return StaticBinary(t, "./cmd/tupper-agent", "tupper-agent")
}

var (
	builtMu sync.Mutex
	built   = map[string]*builtBinary{} // by package and name
)

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// StaticBinary builds the main package pkg (a path relative to the module
// root, "./cmd/tupper-agent") with CGO_ENABLED=0 into a temporary file
// named name, once per test binary, and returns its path: the agent, and
// the stand-ins of the platforms a backend drives (a fake VMM or CLI).
func StaticBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	builtMu.Lock()
	b := built[pkg+"\x00"+name]
	if b == nil {
		b = &builtBinary{}
		built[pkg+"\x00"+name] = b
	}
	builtMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "tupper-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = &buildError{out: string(out), err: err}
		}
	})
	if b.err != nil {
		t.Fatalf("build %s: %v", pkg, b.err)
	}
	return b.path
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// ModuleRoot returns the repository's root directory.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
