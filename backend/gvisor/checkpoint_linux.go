package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

var _ backend.Checkpointer = (*Backend)(nil)

// A checkpoint is runsc's image of the whole sandbox (its kernel's state
// and the pages of its memory, among them those of the overlay that holds
// every file the sandbox wrote: see overlayFlag), the sandbox's console,
// and a manifest, written last: a directory without one holds no
// checkpoint.
const (
	manifestName     = "tupper-checkpoint.json"
	checkpointFormat = 1
)

// manifest says what a checkpoint was made of, so that a restore on
// something else is refused rather than booting a sandbox whose files
// changed under it.
type manifest struct {
	Format    int       `json:"format"`
	Backend   string    `json:"backend"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	// RootFS is the image the sandbox ran on: runsc's gofer serves it as
	// the lower layer, which the saved overlay sits on.
	RootFS    string `json:"rootfs"`
	DiskBytes int64  `json:"diskBytes"`
}

// Checkpoint implements backend.Checkpointer with runsc checkpoint.
// Open connections into the sandbox are reset either way.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string, keep bool) (retErr error) {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("sandbox %q: checkpoint directory %q must be absolute: %w", id, dir, errdefs.ErrInvalidArgument)
	}
	begin := time.Now()
	if err := b.checkpoint(ctx, id, dir, keep); err != nil {
		return err
	}
	if !keep {
		if err := b.Stop(ctx, id); err != nil {
			// The state is saved; what is left is the stop's to retry.
			b.Log.Warn("checkpointed sandbox did not stop cleanly", "sandbox", id, "err", err)
		}
	}
	b.Log.Info("sandbox checkpointed", "sandbox", id, "dir", dir, "keep", keep, "took", time.Since(begin))
	return nil
}

func (b *Backend) checkpoint(ctx context.Context, id, dir string, keep bool) (retErr error) {
	defer b.Locks.Lock(id)()
	st, err := b.State(ctx, id)
	if err != nil {
		return err
	}
	if st != backend.StateRunning {
		return fmt.Errorf("sandbox %q: checkpoint: sandbox is %s: %w", id, st, errdefs.ErrFailedPrecondition)
	}
	var rec record
	bundle := b.BundleDir(id)
	if err := readJSON(filepath.Join(bundle, oci.RecordFile), &rec); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if rec.RootFS == "" {
		return fmt.Errorf("sandbox %q: checkpoint: it was started by a Tupper that did not record its image: %w", id, errdefs.ErrNotSupported)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(dir)
		}
	}()
	rctx, cancel := oci.Context(ctx)
	defer cancel()
	// Always --leave-running: runsc's save without it ends the sandbox
	// whatever the outcome, so a checkpoint that fails (a full disk)
	// would lose it. A sandbox to be stopped is frozen first, so that it
	// runs on no further than the saved state, and stopped by Checkpoint
	// once saved; a failure thaws it.
	if !keep {
		if err := b.Cmd.Pause(rctx, id); err != nil {
			return fmt.Errorf("sandbox %q: freeze for the checkpoint: %w", id, runscError(err))
		}
		defer func() {
			if retErr != nil {
				if err := b.Cmd.Resume(context.WithoutCancel(rctx), id); err != nil {
					b.Log.Error("thaw a sandbox whose checkpoint failed", "sandbox", id, "err", err)
				}
			}
		}()
	}
	if err := b.Cmd.Checkpoint(rctx, id, &runc.CheckpointOpts{ImagePath: dir}, runc.LeaveRunning); err != nil {
		return fmt.Errorf("sandbox %q: runsc checkpoint: %w", id, runscError(err))
	}
	if err := oci.CopyFile(oci.ConsolePath(bundle), filepath.Join(dir, oci.CheckpointConsole)); err != nil {
		b.Log.Warn("checkpoint without the sandbox's console", "sandbox", id, "err", err)
	}
	m := manifest{
		Format: checkpointFormat, Backend: "gvisor", ID: id, CreatedAt: time.Now().UTC(),
		RootFS: rec.RootFS, DiskBytes: rec.DiskBytes,
	}
	if err := oci.WriteJSON(filepath.Join(dir, manifestName), m); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	return nil
}

// Restore implements backend.Checkpointer: Start's steps, with runsc
// restore from dir in place of create and start. It refuses, with
// errdefs.ErrFailedPrecondition, a directory without a manifest of this
// backend and a spec whose image is not the checkpoint's. The sandbox
// keeps the disk cap it was saved with: its files are in the checkpoint.
func (b *Backend) Restore(ctx context.Context, spec *backend.Spec, dir string) (*backend.Sandbox, error) {
	if spec == nil {
		return nil, fmt.Errorf("gvisor restore: nil spec: %w", errdefs.ErrInvalidArgument)
	}
	var m manifest
	if err := readJSON(filepath.Join(dir, manifestName), &m); err != nil {
		return nil, fmt.Errorf("sandbox %q: %s holds no checkpoint (%v): %w", spec.ID, dir, err, errdefs.ErrFailedPrecondition)
	}
	if m.Format != checkpointFormat || m.Backend != "gvisor" {
		return nil, fmt.Errorf("sandbox %q: the checkpoint in %s is format %d of backend %q, not %d of gvisor: %w",
			spec.ID, dir, m.Format, m.Backend, checkpointFormat, errdefs.ErrFailedPrecondition)
	}
	if filepath.Clean(spec.RootFS) != filepath.Clean(m.RootFS) {
		return nil, fmt.Errorf("sandbox %q: the checkpoint in %s was made on image %s, not %s: %w",
			spec.ID, dir, m.RootFS, spec.RootFS, errdefs.ErrFailedPrecondition)
	}
	out := *spec
	if m.DiskBytes != 0 {
		out.Resources.DiskBytes = m.DiskBytes
	}
	return b.boot(ctx, &out, dir)
}

// runscError is err of a runsc command, its output cut to its first line
// (a failed save may print a goroutine dump), and a full disk told apart
// (runsc reports ENOSPC as text).
func runscError(err error) error {
	msg := err.Error()
	first, _, _ := strings.Cut(msg, "\n")
	if len(first) > 500 {
		first = first[:500] + "…"
	}
	if strings.Contains(msg, "no space left on device") {
		return fmt.Errorf("%s: %w", first, syscall.ENOSPC)
	}
	return errors.New(first)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
