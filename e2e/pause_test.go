package e2e

import (
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BPauseResume runs e2b/pause.mjs with the newest pinned e2b JS SDK
// against a real `tupper serve`: a sandbox with a server holding a value
// in memory, a counting loop and files in /tmp and the home directory is
// paused, the daemon restarts, and connect resumes it with all of it; then
// the lifecycle options (onTimeout pause, autoResume), snapshots (two
// sandboxes from one, listed with pages, deleted) and a fork of 3.
func TestE2BPauseResume(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and restarts the daemon")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t)
	state := filepath.Join(t.TempDir(), "state.json")
	sdk := "e2b@" + versions[0]
	runScript(t, node, dir, d, "pause.mjs", sdk, "PHASE=before", "STATE="+state)
	d.stop(t)
	d.start(t)
	runScript(t, node, dir, d, "pause.mjs", sdk, "PHASE=after", "STATE="+state)
}
