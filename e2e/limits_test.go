package e2e

import (
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BLimits runs e2b/limits.mjs, with every pinned version of the
// published e2b JS SDK, against a real `tupper serve`: a memory bomb is
// killed alone and reported as a CommandExitError with exit code 137, and
// the sandbox, its /tmp and its other processes live on.
func TestE2BLimits(t *testing.T) {
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t)
	for _, v := range versions {
		t.Run("e2b@"+v, func(t *testing.T) {
			runScript(t, node, dir, d, "limits.mjs", "e2b@"+v)
		})
	}
}
