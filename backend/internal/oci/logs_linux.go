package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/network"
)

// Logs implements backend.LogReader: it opens sandbox id's console, the
// file in its bundle's LogDir that the runtime and then the agent write
// to. The console lives as long as the bundle: a stopped or paused
// sandbox has none here (a checkpoint keeps a copy of its own).
func (r *Runtime) Logs(ctx context.Context, id string) (io.ReadCloser, error) {
	if err := network.ValidateID(id); err != nil {
		return nil, err
	}
	f, err := os.Open(ConsolePath(r.BundleDir(id)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %q: no console: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: console: %w", id, err)
	}
	return f, nil
}
