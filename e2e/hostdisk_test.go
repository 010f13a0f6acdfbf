package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/internal/testutil"
	"github.com/lightbearco/tupper/sdk"
)

// fillHost fills the file system of dir, with a file there, until only
// leave bytes are free, and returns a function that removes the file.
func fillHost(t *testing.T, dir string, leave int64) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "host-filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := testutil.FreeBytes(t, dir) - leave; n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	removed := false
	free = func() {
		if !removed {
			removed = true
			if err := os.Remove(path); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(free)
	return free
}

// TestHostDiskFull runs the daemon with its state on a small file system of
// the test's own and fills it, once from the host and once from inside a
// sandbox whose cap is larger than the room left: creates answer 503
// naming the disk, uploads 507, the sandboxes get ENOSPC and live on, the
// daemon stays up and answers, and all works again once space is freed.
func TestHostDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("boots gVisor sandboxes and fills a disk")
	}
	root := scratchRoot(t, 384<<20)
	d := startServeDaemonIn(t, root, "--disk", "1G")
	client := goClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	a, err := client.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill(context.WithoutCancel(ctx))
	b, err := client.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := []byte("kept\n")
	if _, err := a.Files.Write(ctx, "/home/user/data.txt", old); err != nil {
		t.Fatal(err)
	}

	// full checks what a full host disk does, and that the daemon stays up.
	full := func(t *testing.T) {
		t.Helper()
		_, err := client.Create(ctx, sdk.CreateOptions{})
		if !sdk.IsUnavailable(err) || !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), root) {
			t.Errorf("create on a full host disk: %v; want unavailable, naming the disk", err)
		}
		status, body, err := d.api(ctx, http.MethodPost, "/sandboxes", map[string]any{})
		if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), "free space on it and retry") {
			t.Errorf("POST /sandboxes on a full host disk: %d %s %v; want 503 saying what to do", status, body, err)
		}
		_, err = a.Files.Write(ctx, "/home/user/data.txt", bytes.Repeat([]byte("n"), 32<<20))
		if !sdk.IsDiskFull(err) {
			t.Errorf("an upload on a full host disk: %v; want a disk-full error", err)
		}
		if got, err := a.Files.Read(ctx, "/home/user/data.txt"); err != nil || !bytes.Equal(got, old) {
			t.Errorf("the old file after the failed upload: %q, %v", got, err)
		}
		_, err = a.Commands.Run(ctx, "dd if=/dev/zero of=/tmp/more bs=1M count=64")
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || !strings.Contains(exit.Stderr, "No space left on device") {
			t.Errorf("a filler on a full host disk: %v; want ENOSPC", err)
		}
		a.Commands.Run(ctx, "rm -f /tmp/more")
		if out := mustRun(ctx, t, a, "echo alive"); out != "alive\n" {
			t.Errorf("echo alive = %q", out)
		}
		page, _, err := client.List(ctx, sdk.ListOptions{})
		if err != nil || len(page) < 1 {
			t.Errorf("list on a full host disk: %v, %v", page, err)
		}
		if !d.running() {
			t.Fatal("the daemon exited")
		}
	}
	// works checks that all works again once space is back.
	works := func(t *testing.T) {
		t.Helper()
		c, err := client.Create(ctx, sdk.CreateOptions{})
		if err != nil {
			t.Fatalf("create once space is back: %v", err)
		}
		mustRun(ctx, t, c, "echo alive")
		if err := c.Kill(ctx); err != nil {
			t.Error(err)
		}
		if _, err := a.Files.Write(ctx, "/home/user/data.txt", []byte("new\n")); err != nil {
			t.Errorf("upload once space is back: %v", err)
		}
		a.Files.Write(ctx, "/home/user/data.txt", old)
	}

	t.Run("filled from the host", func(t *testing.T) {
		release := fillHost(t, root, 8<<20)
		full(t)
		// A kill on a full disk: the sandbox goes, and its record says so.
		if err := b.Kill(ctx); err != nil {
			t.Errorf("kill on a full host disk: %v", err)
		}
		if _, err := client.Connect(ctx, b.ID()); !sdk.IsNotFound(err) {
			t.Errorf("connect to the sandbox killed on a full disk: %v; want not found", err)
		}
		release()
		works(t)
	})

	t.Run("filled from a sandbox", func(t *testing.T) {
		c, err := client.Create(ctx, sdk.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// a's cap (1 GiB) is larger than the room left on the host: its
		// writes stop at the host's ENOSPC.
		_, err = a.Commands.Run(ctx, "dd if=/dev/zero of=/home/user/fill bs=1M count=1024")
		var exit *sdk.CommandExitError
		if !errors.As(err, &exit) || !strings.Contains(exit.Stderr, "No space left on device") {
			t.Fatalf("filling the host from a sandbox: %v; want ENOSPC", err)
		}
		t.Logf("%.1f MiB left on the host", float64(testutil.FreeBytes(t, root))/(1<<20))
		full(t)
		// Not a byte left: a kill still ends the sandbox.
		if err := c.Kill(ctx); err != nil {
			t.Errorf("kill with no space left on the host: %v", err)
		}
		if _, err := client.Connect(ctx, c.ID()); !sdk.IsNotFound(err) {
			t.Errorf("connect to the sandbox killed with no space left: %v; want not found", err)
		}
		mustRun(ctx, t, a, "rm /home/user/fill")
		testutil.WaitFor(t, 30*time.Second, "the sandbox's space to return to the host", func() bool {
			return testutil.FreeBytes(t, root) > 128<<20
		})
		works(t)
	})
}
