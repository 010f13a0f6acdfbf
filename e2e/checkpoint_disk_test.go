package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/sdk"
)

// TestCheckpointsOnAFullDisk runs the daemon with its state on a small
// file system of the test's own, fills it from the host, then uploads a
// template's files, and takes a snapshot, a fork and a pause of a sandbox
// whose memory does not fit in what is left: each answers 503 naming the
// disk (never a 500), the sandbox runs on untouched, and nothing
// half-written is left on the disk; once space is back, all of them work.
func TestCheckpointsOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and fills a disk")
	}
	root := scratchRoot(t, 512<<20)
	d := startServeDaemonIn(t, root, "--disk", "1G", "--build-egress", "deny")
	client := goClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	sb, err := client.Create(ctx, sdk.CreateOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	// 64 MiB that no compression makes smaller, in memory only.
	if _, err := sb.Commands.Start(ctx, `python3 -c 'import os, time; b = os.urandom(64 << 20); open("/tmp/held", "w").write("y"); time.sleep(3600)'`, sdk.WithTimeout(0)); err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		r, err := sb.Commands.Run(ctx, "cat /tmp/held")
		return err == nil && r.Stdout == "y"
	}
	waitUntil(t, time.Minute, "the memory to be held", held)
	tpl := requestTemplate(ctx, t, d, "full-disk-"+randomHexN(t, 4))

	// leftovers lists what checkpoints and uploads left on the disk.
	leftovers := func() []string {
		var out []string
		for _, dir := range []string{"snapshots", "forks", "paused", "templates/uploads"} {
			filepath.WalkDir(filepath.Join(root, dir), func(p string, de os.DirEntry, err error) error {
				if err == nil && !de.IsDir() {
					out = append(out, p)
				}
				return nil
			})
		}
		return out
	}
	free := fillHost(t, root, 24<<20)

	t.Run("upload", func(t *testing.T) {
		link := uploadLink(ctx, t, d, tpl.TemplateID, randomHexN(t, 32))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, link, bytes.NewReader(make([]byte, 48<<20)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body.String(), "disk is full") {
			t.Errorf("an upload of files on a full disk: %s %s, want 503 naming the disk", resp.Status, body.String())
		}
		if left := leftovers(); len(left) != 0 {
			t.Errorf("the upload on a full disk left %v", left)
		}
	})

	t.Run("checkpoints", func(t *testing.T) {
		for _, tt := range []struct {
			name, path string
			body       any
		}{
			{"snapshot", "/sandboxes/" + sb.ID() + "/snapshots", map[string]any{}},
			{"fork", "/sandboxes/" + sb.ID() + "/fork", map[string]any{"count": 1}},
			{"pause", "/sandboxes/" + sb.ID() + "/pause", map[string]any{}},
		} {
			status, body, err := d.api(ctx, http.MethodPost, tt.path, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "disk is full") {
				t.Errorf("%s on a full disk: %d %.300s, want 503 naming the disk", tt.name, status, body)
			}
			if !held() {
				t.Fatalf("after the %s on a full disk, the sandbox lost its process", tt.name)
			}
			if left := leftovers(); len(left) != 0 {
				t.Errorf("the %s on a full disk left %v", tt.name, left)
			}
		}
	})

	free()
	status, body, err := d.api(ctx, http.MethodPost, "/sandboxes/"+sb.ID()+"/snapshots", map[string]any{})
	if err != nil || status != http.StatusCreated {
		t.Errorf("a snapshot once space is back: %d %s %v", status, body, err)
	}
	status, body, err = d.api(ctx, http.MethodPost, "/sandboxes/"+sb.ID()+"/pause", map[string]any{})
	if err != nil || status != http.StatusNoContent {
		t.Errorf("a pause once space is back: %d %s %v", status, body, err)
	}
}
