//go:build !linux

package image

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"

	"github.com/lightbearco/tupper/errdefs"
)

// canUnpack says whether this host can unpack images: only Linux keeps
// their owners, modes and device files (see Config.BlobsOnly).
const canUnpack = false

func applyLayer(context.Context, string, io.Reader, *slog.Logger) error {
	return fmt.Errorf("unpacking images on %s: %w", runtime.GOOS, errdefs.ErrNotSupported)
}

func treeSize(string) (int64, error) { return 0, nil }

func syncFS(string) error { return nil }
