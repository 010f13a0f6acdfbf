package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BWarmPool runs e2b/warm.mjs with the newest pinned e2b JS SDK
// against `tupper serve --warm base=2`: two users' creates in a row take
// sandboxes of the pool (the daemon's log says so for each), each gets its
// own envs, metadata, timeout and token, and the second finds nothing of
// the first's files, processes or environment.
func TestE2BWarmPool(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t, "--warm", "base=2")
	testutil.WaitFor(t, time.Minute, "the warm pool to fill", func() bool {
		return strings.Count(d.log(), `msg="sandbox created" `) >= 2
	})
	state := filepath.Join(t.TempDir(), "ids.json")
	runScript(t, node, dir, d, "warm.mjs", "e2b@"+versions[0], "STATE="+state)
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	if err := json.Unmarshal(data, &ids); err != nil {
		t.Fatal(err)
	}
	log := d.log()
	for who, id := range ids {
		if !strings.Contains(log, `msg="sandbox created from a warm pool" sandbox=`+id) {
			t.Errorf("%s's sandbox %s did not come from the warm pool; the daemon's log:\n%s", who, id, tailLines(log, 30))
		}
	}
}
