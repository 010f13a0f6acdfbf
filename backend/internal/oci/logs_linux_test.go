package oci

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

// TestLogs reads a sandbox's console from its bundle, and refuses a
// sandbox without one and an id that could leave the bundles' directory.
func TestLogs(t *testing.T) {
	r := &Runtime{Name: "test", Sandboxes: t.TempDir()}
	ctx := context.Background()
	const id = "abc123"
	if err := os.MkdirAll(filepath.Join(r.BundleDir(id), LogDir), 0o700); err != nil {
		t.Fatal(err)
	}
	const console = "time=2026-01-02T03:04:05.000Z level=INFO msg=\"agent serving\"\n"
	if err := os.WriteFile(ConsolePath(r.BundleDir(id)), []byte(console), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := r.Logs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != console {
		t.Errorf("Logs read %q, %v; want the console", b, err)
	}
	if _, ok := rc.(io.Seeker); !ok {
		t.Errorf("the console's reader cannot seek: a read of its end reads all of it")
	}
	if _, err := r.Logs(ctx, "other"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Logs of a sandbox without a bundle: %v, want not found", err)
	}
	if _, err := r.Logs(ctx, "../"+id); err == nil {
		t.Errorf("Logs of an id that climbs out of the bundles: no error")
	}
}
