package e2e

import (
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BCodeInterpreter runs e2b/codeinterpreter.mjs, the published
// @e2b/code-interpreter SDK unchanged, against a real `tupper serve` with
// the code-interpreter template: Sandbox.create() with no template, state
// across cells, streaming, a matplotlib PNG, a DataFrame's HTML, errors,
// JavaScript, TypeScript and bash, contexts, and a cell interrupted at its
// timeout.
func TestE2BCodeInterpreter(t *testing.T) {
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	d := startInterpreterDaemon(t)
	runScript(t, node, dir, d, "codeinterpreter.mjs", "@e2b/code-interpreter@2.8.0")
}
