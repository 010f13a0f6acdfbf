package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/network"
)

var _ backend.Exporter = (*Backend)(nil)

// ExportChanges implements backend.Exporter: runsc writes the upper layer
// of the sandbox's root overlay (every file it wrote or deleted; see
// overlayFlag) as a tar, which is made an OCI layer on its way to w.
func (b *Backend) ExportChanges(ctx context.Context, id string, w io.Writer) error {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	defer b.Locks.Lock(id)()
	if _, err := b.State(ctx, id); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(b.BundleDir(id), "upper-*.tar")
	if err != nil {
		return fmt.Errorf("sandbox %q: export: %w", id, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	args := append([]string{"--root", b.Cmd.Root}, b.Cmd.ExtraArgs...)
	args = append(args, "tar", "rootfs-upper", "--file", tmp.Name(), id)
	rctx, cancel := oci.Context(ctx)
	defer cancel()
	if out, err := exec.CommandContext(rctx, b.Cmd.Command, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox %q: runsc tar rootfs-upper: %w: %s", id, err, bytes.TrimSpace(out))
	}
	var ca []byte
	if b.Egress != nil {
		ca = b.Egress.CACertPEM()
	}
	if err := oci.LayerFromOverlay(tmp, w, oci.SandboxFilesFilter(ca)); err != nil {
		return fmt.Errorf("sandbox %q: export %s: %w", id, filepath.Base(tmp.Name()), err)
	}
	return nil
}
