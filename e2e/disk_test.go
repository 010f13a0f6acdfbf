package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// scratchRoot returns a state directory for a daemon on a file system of
// the test's own, of size bytes, mounted on a short directory in /tmp
// (runsc's socket paths under a daemon's root must stay under 108 bytes):
// its free space moves only with what the daemon does, and the test may
// fill it. The mount is the root's parent, so that it is no leftover of
// the daemon's.
func scratchRoot(t *testing.T, size int64) string {
	t.Helper()
	testutil.RequiresRoot(t)
	mnt, err := os.MkdirTemp("", "td-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	testutil.MountScratchFS(t, mnt, size)
	root := filepath.Join(mnt, "r")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return root
}

// goClient is a Go SDK client of the daemon d, with key.
func goClient(t testing.TB, d *serveDaemon) *sdk.Client {
	t.Helper()
	tr, err := sdk.NewHTTPTransport(sdk.HTTPConfig{APIURL: d.URL, APIKey: d.Key})
	if err != nil {
		t.Fatal(err)
	}
	return &sdk.Client{Transport: tr}
}

// mustRun runs cmd in sb and returns its output; a failure fails the test.
func mustRun(ctx context.Context, t *testing.T, sb *sdk.Sandbox, cmd string) string {
	t.Helper()
	r, err := sb.Commands.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return r.Stdout
}

// uploadRaw posts data to path in sandbox sb through the daemon's data
// plane as the E2B SDKs do (one multipart part), and returns the status and
// body of the answer.
func uploadRaw(ctx context.Context, t *testing.T, d *serveDaemon, id, token, path string, data io.Reader) (int, string) {
	t.Helper()
	pr, pw := io.Pipe()
	boundary := "tupperdisktest"
	go func() {
		fmt.Fprintf(pw, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=%q\r\nContent-Type: application/octet-stream\r\n\r\n", boundary, path)
		if _, err := io.Copy(pw, data); err != nil {
			pw.CloseWithError(err)
			return
		}
		fmt.Fprintf(pw, "\r\n--%s--\r\n", boundary)
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+"/files?"+url.Values{"path": {path}, "username": {"user"}}.Encode(), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestDiskCap checks a sandbox's disk cap through every face: the daemon's
// default and maximum, a create's own cap (Go SDK, REST, CLI), fillers that
// get ENOSPC at the cap in the home and in /tmp while the host loses no
// more than the cap, an upload past it that answers 507 and leaves the old
// file, a sandbox that lives on, and the published e2b SDK's error.
func TestDiskCap(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and fills their disks")
	}
	node := requireNode(t)
	dir := filepath.Join(testutil.ModuleRoot(), "e2e", "e2b")
	npmCI(t, dir)
	// Sparse: it takes on the host only what the daemon writes.
	root := scratchRoot(t, 4<<30)
	d := startServeDaemonIn(t, root, "--disk", "64M", "--max-disk", "512M")
	client := goClient(t, d)

	t.Run("maximum", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := client.Create(ctx, sdk.CreateOptions{DiskMB: 1024})
		if !sdk.IsInvalidArgument(err) || !strings.Contains(err.Error(), "maximum of 512 MB") {
			t.Errorf("a create of 1 GiB under --max-disk 512M: %v; want invalid argument naming the maximum", err)
		}
		status, body, err := d.api(ctx, http.MethodPost, "/sandboxes", map[string]any{"diskSizeMB": 600})
		if err != nil || status != http.StatusBadRequest || !strings.Contains(string(body), "--max-disk") {
			t.Errorf("POST /sandboxes diskSizeMB 600: %d %s %v; want 400 saying what to do", status, body, err)
		}
	})

	t.Run("go-sdk", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		const capMB = 160
		sb, err := client.Create(ctx, sdk.CreateOptions{DiskMB: capMB})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Kill(context.WithoutCancel(ctx))
		if info, err := sb.GetInfo(ctx); err != nil || info.DiskSizeMB != capMB {
			t.Errorf("GetInfo = %+v, %v; want diskSizeMB %d", info, err, capMB)
		}
		if out := mustRun(ctx, t, sb, "df -m / | awk 'NR==2 {print $2}'"); strings.TrimSpace(out) != fmt.Sprint(capMB) {
			t.Errorf("df in the sandbox says the disk is %q MB, want %d", strings.TrimSpace(out), capMB)
		}
		old := []byte("the old content\n")
		if _, err := sb.Files.Write(ctx, "/home/user/data.csv", old); err != nil {
			t.Fatal(err)
		}

		before := testutil.FreeBytes(t, root)
		for _, fill := range []string{
			"dd if=/dev/zero of=/home/user/fill bs=1M count=400",
			"fallocate -l 400M /tmp/fill2",
			"head -c 400M /dev/zero > /tmp/fill3",
		} {
			_, err := sb.Commands.Run(ctx, fill)
			var exit *sdk.CommandExitError
			if !errors.As(err, &exit) || !strings.Contains(exit.Stderr, "No space left on device") {
				t.Errorf("%s under a %d MB cap: %v; want it to fail with ENOSPC", fill, capMB, err)
			}
		}
		out := mustRun(ctx, t, sb, "du -cm /home/user/fill /tmp/fill2 /tmp/fill3 | tail -1")
		t.Logf("the fillers hold %s MB", strings.Fields(out)[0])
		drop := before - testutil.FreeBytes(t, root)
		t.Logf("the host lost %.1f MiB to a sandbox capped at %d MiB", float64(drop)/(1<<20), capMB)
		// Slack: the file system's metadata, the daemon's log and records.
		if drop > (capMB+16)<<20 {
			t.Errorf("the host lost %d MiB to a sandbox capped at %d MiB", drop>>20, capMB)
		}

		// Full: an upload fails with 507 and leaves the old file.
		_, err = sb.Files.Write(ctx, "/home/user/data.csv", bytes.Repeat([]byte("n"), 8<<20))
		if !sdk.IsDiskFull(err) || !sdk.IsResourceExhausted(err) || !strings.Contains(err.Error(), "disk space") {
			t.Errorf("an upload to a full disk: %v; want a disk-full error", err)
		}
		if got, err := sb.Files.Read(ctx, "/home/user/data.csv"); err != nil || !bytes.Equal(got, old) {
			t.Errorf("the old file after the failed upload: %q, %v", got, err)
		}
		if out := mustRun(ctx, t, sb, "echo alive"); out != "alive\n" {
			t.Errorf("echo alive = %q", out)
		}

		// With room again, an upload that is itself bigger than the
		// room left, by far more than the agent reads after a failure:
		// 507 from the daemon's data plane, the old file intact, no
		// temporary file left beside it.
		mustRun(ctx, t, sb, "rm -f /home/user/fill /tmp/fill2 /tmp/fill3")
		status, body := uploadRaw(ctx, t, d, sb.ID(), sbToken(ctx, t, d, sb.ID()), "/home/user/data.csv", io.LimitReader(zeros{}, 512<<20))
		if status != http.StatusInsufficientStorage || !strings.Contains(body, "not enough disk space") {
			t.Errorf("upload of 512 MiB under a %d MB cap: %d %s; want 507", capMB, status, body)
		}
		if got, err := sb.Files.Read(ctx, "/home/user/data.csv"); err != nil || !bytes.Equal(got, old) {
			t.Errorf("the old file after the failed upload: %q, %v", got, err)
		}
		if out := mustRun(ctx, t, sb, "find /home/user /tmp -name '.tupper-*'"); out != "" {
			t.Errorf("left behind by the failed uploads:\n%s", out)
		}
		// The disk is the sandbox's again.
		mustRun(ctx, t, sb, "dd if=/dev/zero of=/tmp/again bs=1M count=100 && rm /tmp/again && echo alive")
	})

	t.Run("cli", func(t *testing.T) {
		cli := newTupperCLI(t, d, d.Key)
		var info struct {
			SandboxID  string `json:"sandboxID"`
			DiskSizeMB int    `json:"diskSizeMB"`
		}
		out := cli.ok(t, nil, "create", "--disk", "0.25G", "--json")
		if err := json.Unmarshal([]byte(out), &info); err != nil || info.DiskSizeMB != 256 {
			t.Errorf("tupper create --disk 0.25G --json: %s (%v); want diskSizeMB 256", out, err)
		}
		if out := cli.ok(t, nil, "info", info.SandboxID); !strings.Contains(out, "256 MB") {
			t.Errorf("tupper info does not show the disk:\n%s", out)
		}
		cli.ok(t, nil, "kill", info.SandboxID)
		cli.fails(t, 1, "maximum of 512 MB", "create", "--disk", "1G")
		cli.fails(t, 1, "want a whole number of MB", "create", "--disk", "lots")
	})

	t.Run("e2b@2.51.0", func(t *testing.T) {
		// The E2B SDK cannot ask for a cap: the daemon's --disk 64M holds.
		runScript(t, node, dir, d, "disk.mjs", "e2b@2.51.0")
	})
}

// sbToken returns the access token of sandbox id from the control plane.
func sbToken(ctx context.Context, t *testing.T, d *serveDaemon, id string) string {
	t.Helper()
	status, body, err := d.api(ctx, http.MethodGet, "/sandboxes/"+id, nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /sandboxes/%s: %d %s %v", id, status, body, err)
	}
	var detail struct {
		Token string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(body, &detail); err != nil {
		t.Fatal(err)
	}
	return detail.Token
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
