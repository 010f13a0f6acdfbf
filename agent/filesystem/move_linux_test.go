package filesystem_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/agent/filesystem"
	"github.com/lightbearco/tupper/internal/testutil"
	fspb "github.com/lightbearco/tupper/proto/filesystem"
	"github.com/lightbearco/tupper/proto/filesystem/filesystemconnect"
)

func TestMoveAcrossFilesystems(t *testing.T) {
	requireRoot(t)
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	mustMkdir(t, mnt)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		testutil.Skip(t, fmt.Sprintf("cannot mount tmpfs: %v", err))
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	src := filepath.Join(t.TempDir(), "f")
	mustWrite(t, src, "x")
	forEachCodec(t, filesystem.Config{}, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		_, err := c.Move(context.Background(), req(&fspb.MoveRequest{Source: src, Destination: filepath.Join(mnt, "f")}, ""))
		if got := codeOf(err); got != connect.CodeFailedPrecondition {
			t.Fatalf("code = %v, want failed_precondition (err %v)", got, err)
		}
		if _, err := os.Stat(src); err != nil {
			t.Errorf("source gone after a failed move: %v", err)
		}
	})
}
