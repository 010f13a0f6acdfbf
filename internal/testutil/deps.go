package testutil

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Module is this repository's module path.
const Module = "github.com/lightbearco/tupper"

// ForbidDeps fails t for every package of this module that pkgs (go list
// patterns, such as Module+"/agent/...") import, directly or through others,
// and that forbidden rules out. Entries of forbidden are paths relative to
// the module: "engine" forbids Module+"/engine" and every package below it,
// and "backend/" only the packages below Module+"/backend". Test files do not
// count. It skips where the go command is missing.
func ForbidDeps(t *testing.T, pkgs []string, forbidden []string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		Skip(t, "go command not found: cannot list dependencies")
	}
	// -e: a package that does not compile still lists its imports.
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	cmd.Dir = ModuleRoot()
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %s", strings.Join(pkgs, " "), msg)
	}
	for _, dep := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(dep, Module+"/")
		if !ok {
			continue
		}
		for _, f := range forbidden {
			if forbids(f, rel) {
				t.Errorf("%s depends on %s, which it must not (see who imports it: go list -deps -f '{{.ImportPath}} {{.Imports}}' %s | grep %s)",
					strings.Join(pkgs, " "), dep, strings.Join(pkgs, " "), dep)
			}
		}
	}
}

// forbids reports whether the forbidden entry f rules out the
// module-relative package path p.
func forbids(f, p string) bool {
	if dir, ok := strings.CutSuffix(f, "/"); ok {
		return strings.HasPrefix(p, dir+"/")
	}
	return p == f || strings.HasPrefix(p, f+"/")
}
