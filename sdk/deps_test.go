package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the SDK light: programs that only drive sandboxes
// must not link the engine, a backend, the agent or the server.
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found: cannot list the SDK's dependencies")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/lightbearco/tupper/"
	forbidden := []string{"engine", "backend", "image", "agent", "network", "local", "server"}
	for _, dep := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(dep, mod)
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rest, "/")
		for _, f := range forbidden {
			if top == f {
				t.Errorf("the sdk package depends on %s; it must not import %s%s/...", dep, mod, f)
			}
		}
	}
}
