package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// AgentBinary returns the path of a static tupper-agent binary for tests.
// $TUPPER_AGENT wins when set (the test script builds it once for every
// package); otherwise the agent is built once per test binary with
// CGO_ENABLED=0 into a temporary directory.
func AgentBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TUPPER_AGENT"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TUPPER_AGENT=%s: %v", p, err)
		}
		return p
	}
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tupper-agent-test-")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "tupper-agent")
		cmd := exec.Command("go", "build", "-o", agentPath, "./cmd/tupper-agent")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = &buildError{out: string(out), err: err}
		}
	})
	if agentErr != nil {
		t.Fatalf("build tupper-agent: %v", agentErr)
	}
	return agentPath
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
