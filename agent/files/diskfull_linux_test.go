package files_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/agent/files"
	"github.com/lightbearco/tupper/internal/testutil"
)

// mountTmpfs mounts a small tmpfs in a temporary directory for the test.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		testutil.Skip(t, fmt.Sprintf("cannot mount tmpfs: %v", err))
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

func TestUploadDiskFull(t *testing.T) {
	mnt := mountTmpfs(t, "1m")
	base := newServer(t, files.Config{})
	target := filepath.Join(mnt, "data.bin")
	old := bytes.Repeat([]byte("o"), 100<<10)
	if err := os.WriteFile(target, old, 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("n"), 2<<20)
	tests := []struct {
		name string
		body func() ([]byte, string)
	}{
		{"octet-stream", func() ([]byte, string) { return big, "application/octet-stream" }},
		{"multipart", func() ([]byte, string) {
			r, ct := multipartBody(t, part{"file", target, string(big)})
			var b bytes.Buffer
			b.ReadFrom(r)
			return b.Bytes(), ct
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct := tt.body()
			query := []string{"path", target}
			if ct != "application/octet-stream" {
				query = nil
			}
			status, got := do(t, "POST", filesURL(base, query...), ct, bytes.NewReader(body))
			checkError(t, status, got, 507)
			var e errorBody
			json.Unmarshal(got, &e)
			if !strings.Contains(e.Message, "disk space") {
				t.Errorf("message %q does not mention disk space", e.Message)
			}
			if b, _ := os.ReadFile(target); !bytes.Equal(b, old) {
				t.Errorf("old file changed: %d bytes", len(b))
			}
			noTempFiles(t, mnt)
			var st unix.Statfs_t
			unix.Statfs(mnt, &st)
			if free := st.Bfree * uint64(st.Bsize); free < 512<<10 {
				t.Errorf("only %d bytes free after the failed upload: space not released", free)
			}
		})
	}
}
