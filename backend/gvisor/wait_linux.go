package gvisor

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Wait implements backend.Waiter: it blocks until the sandbox process of id
// exits. It watches the process through a pidfd, so it costs no runsc call
// and no polling of state files.
func (b *Backend) Wait(ctx context.Context, id string) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	pid, err := oci.ReadPid(filepath.Join(b.bundleDir(id), pidFile))
	if err != nil {
		return fmt.Errorf("sandbox %q: wait: %w: %v", id, errdefs.ErrNotFound, err)
	}
	return oci.WaitProcess(ctx, pid, id)
}
