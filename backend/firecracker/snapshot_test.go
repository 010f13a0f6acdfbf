package firecracker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

// testCheckpointDir writes a checkpoint directory whose files have the
// sizes its manifest says, and returns it with the manifest.
func testCheckpointDir(t *testing.T) (string, manifest) {
	t.Helper()
	dir := t.TempDir()
	m := manifest{
		Format: snapshotFormat, Backend: "firecracker", ID: "sb1",
		VMMVersion: "1.12.0", AgentSum: "aaaa", ImageKey: "key1", ChainID: "sha256:chain",
		Jailed: true, VCPUs: 2, MemoryMiB: 256, CPUs: 1.5, DiskBytes: 64 << 20,
	}
	for i, name := range snapshotFiles {
		data := strings.Repeat("x", 10*(i+1))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, manifestFile{Name: name, Size: int64(len(data))})
	}
	return dir, m
}

// TestManifestCheck checks what a checkpoint may be restored into: the
// same format, root layout, image and agent, and every file whole.
func TestManifestCheck(t *testing.T) {
	good := restoreTarget{Jailed: true, ImageKey: "key1", AgentSum: "aaaa"}
	tests := []struct {
		name   string
		change func(dir string, m *manifest, tg *restoreTarget)
		want   string // in the error; empty: restorable
	}{
		{"restorable", func(string, *manifest, *restoreTarget) {}, ""},
		{"no agent in the spec", func(_ string, _ *manifest, tg *restoreTarget) { tg.AgentSum = "" }, ""},
		{"another format", func(_ string, m *manifest, _ *restoreTarget) { m.Format = snapshotFormat + 1 }, "format 2"},
		{"another backend", func(_ string, m *manifest, _ *restoreTarget) { m.Backend = "gvisor" }, `"gvisor" checkpoint`},
		{"made without the jailer", func(_ string, m *manifest, _ *restoreTarget) { m.Jailed = false }, "made without the jailer"},
		{"another image", func(_ string, _ *manifest, tg *restoreTarget) { tg.ImageKey = "key2" }, "image sha256:chain (disk key1), not the spec's (disk key2)"},
		{"another agent", func(_ string, _ *manifest, tg *restoreTarget) { tg.AgentSum = "bbbb" }, "agent sha256:aaaa, not the spec's sha256:bbbb"},
		{"memory cut short", func(dir string, _ *manifest, _ *restoreTarget) {
			os.Truncate(filepath.Join(dir, snapMemName), 5)
		}, "memory is 5 bytes, the manifest says 20"},
		{"no disk", func(dir string, _ *manifest, _ *restoreTarget) { os.Remove(filepath.Join(dir, rwDiskName)) }, "rw.ext4"},
		{"a file unlisted", func(_ string, m *manifest, _ *restoreTarget) { m.Files = m.Files[1:] }, "lists no vmstate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, m := testCheckpointDir(t)
			tg := good
			tt.change(dir, &m, &tg)
			err := m.check(dir, tg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("check = %v, want restorable", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check = %v, want a failed precondition saying %q", err, tt.want)
			}
		})
	}
}

// TestReadManifest checks that a directory without a manifest holds no
// checkpoint, and that a bad one says so.
func TestReadManifest(t *testing.T) {
	dir := t.TempDir()
	if _, err := readManifest(dir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("no manifest: %v, want not found", err)
	}
	os.WriteFile(filepath.Join(dir, manifestName), []byte("{not json"), 0o600)
	if _, err := readManifest(dir); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad manifest: %v, want invalid", err)
	}
}
