//go:build !unix

package image

import (
	"context"
	"fmt"
	"runtime"

	"github.com/lightbearco/tupper/errdefs"
)

type fileLock struct{}

func lockFile(context.Context, string, bool) (*fileLock, error) {
	return nil, fmt.Errorf("image store on %s: %w", runtime.GOOS, errdefs.ErrNotSupported)
}

func tryLockFile(string, bool) (*fileLock, bool, error) {
	return nil, false, fmt.Errorf("image store on %s: %w", runtime.GOOS, errdefs.ErrNotSupported)
}

func (l *fileLock) release() {}
