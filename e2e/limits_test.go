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

// TestE2BMemoryAttacks runs e2b/memory.mjs, with the newest pinned
// version of the published e2b JS SDK, against a real `tupper serve`:
// ten rounds of five memory attacks (3 GiB in one call, 256 MiB steps, a
// fork bomb that allocates, four workers, root in 64 MiB steps), each
// ending with the attacker's death (137, or MemoryError) while the
// sandbox answers and its files are intact; a background server in it
// lives through the single-process attacks (the many-process ones may
// take it too: memory.mjs says when, and restarts it).
func TestE2BMemoryAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("fills gVisor sandboxes' memory fifty times")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t)
	runScript(t, node, dir, d, "memory.mjs", "e2b@"+versions[0], "MEMORY_ROUNDS=10")
}
