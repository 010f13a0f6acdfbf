package e2e

import (
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BTemplateBuild runs e2b/template.mjs with the newest pinned e2b
// JS SDK against a real `tupper serve`: Template.build of a template from
// the local test image with runCmd, copy, env, workdir and a start command
// with waitForPort; Sandbox.create of its name and of its id sees every
// step's result with the server answering; the same build again comes
// from the cache; a failing step fails the build; list and delete. Build
// sandboxes get no egress: nothing leaves the machine.
func TestE2BTemplateBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a template in gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	_, base := testutil.TestImage(t)
	d := startServeDaemon(t, "--build-egress", "deny")
	runScript(t, node, dir, d, "template.mjs", "e2b@"+versions[0], "BASE_IMAGE="+base)
}
