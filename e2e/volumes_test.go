package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/internal/testutil"
)

// TestE2BVolumes runs e2b/volumes.mjs with the newest pinned e2b JS SDK
// against a real `tupper serve`: volumes made, filled and read through
// every content route; two sandboxes that mount one at once see each
// other's writes, and a third reads them once both are gone, after a
// restart of the daemon with the volumes unmounted in between (as a
// host's reboot leaves them); links planted by a sandbox lead no content
// call out of the volume; the size cap holds inside and through uploads;
// another team's key sees nothing.
func TestE2BVolumes(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and restarts the daemon")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	versions := pinnedSDKVersions(t, dir)
	npmCI(t, dir)
	d := startServeDaemon(t)
	other := d.addKey(t, "--team", "other", "--name", "other")
	t.Cleanup(func() { deleteVolumes(t, d) })
	os.Remove("/etc/tupper-volume-e2e")
	state := filepath.Join(t.TempDir(), "state.json")
	sdk := "e2b@" + versions[0]
	env := []string{"STATE=" + state, "E2B_VOLUME_API_URL=" + d.URL}
	runScript(t, node, dir, d, "volumes.mjs", sdk, append(env, "PHASE=before")...)
	d.stop(t)
	if n := unmountVolumes(t, d.Root); n != 2 {
		t.Errorf("unmounted %d volumes while the daemon was down, want 2", n)
	}
	d.start(t)
	if n := len(volumeMountPoints(t, d.Root)); n != 2 {
		t.Errorf("%d volumes mounted once the daemon is up again, want 2", n)
	}
	runScript(t, node, dir, d, "volumes.mjs", sdk, append(env, "PHASE=after", "OTHER_KEY="+other)...)
	if _, err := os.Stat("/etc/tupper-volume-e2e"); err == nil {
		os.Remove("/etc/tupper-volume-e2e")
		t.Error("an upload through a planted link reached the host's /etc")
	}
}

// unmountVolumes unmounts the volumes of the daemon at root, as a host's
// reboot would, and returns how many it unmounted.
func unmountVolumes(t *testing.T, root string) int {
	t.Helper()
	mnts := volumeMountPoints(t, root)
	for _, m := range mnts {
		if err := unix.Unmount(m, 0); err != nil {
			t.Fatalf("unmount %s: %v", m, err)
		}
	}
	return len(mnts)
}

// volumeMountPoints lists the mounted volumes of the daemon at root.
func volumeMountPoints(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prefix := filepath.Join(root, "engine", "volumes") + "/"
	var mnts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
			mnts = append(mnts, fields[4])
		}
	}
	return mnts
}

// deleteVolumes kills the sandboxes of d's key and deletes its volumes,
// which are mounts under d's root: the daemon's cleanup counts what is
// left mounted there.
func deleteVolumes(t *testing.T, d *serveDaemon) {
	if !d.running() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range d.sandboxIDs(ctx, t) {
		d.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
	}
	status, body, err := d.api(ctx, http.MethodGet, "/volumes", nil)
	if err != nil || status != http.StatusOK {
		t.Errorf("cleanup: list volumes: %d %s %v", status, body, err)
		return
	}
	var vols []struct {
		VolumeID string `json:"volumeID"`
	}
	json.Unmarshal(body, &vols)
	for _, v := range vols {
		if status, body, err := d.api(ctx, http.MethodDelete, "/volumes/"+v.VolumeID, nil); err != nil || status != http.StatusNoContent {
			t.Errorf("cleanup: delete volume %s: %d %s %v", v.VolumeID, status, body, err)
		}
	}
}
