package local

import (
	"context"
	"io"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/sdk"
	"github.com/lightbearco/tupper/volume"
)

var _ sdk.VolumeTransport = (*Runtime)(nil)

func volumeInfo(v *engine.Volume, withToken bool) *sdk.VolumeInfo {
	info := &sdk.VolumeInfo{ID: v.ID, Name: v.Name, SizeMB: v.SizeBytes >> 20, CreatedAt: v.CreatedAt}
	if withToken {
		info.Token = v.Token
	}
	return info
}

func volumeEntry(e *volume.Entry) *sdk.VolumeEntry {
	return &sdk.VolumeEntry{
		Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target,
	}
}

// volumeMounts are a create's volume mounts as the engine takes them.
func volumeMounts(ms []sdk.VolumeMount) []engine.VolumeMount {
	var out []engine.VolumeMount
	for _, m := range ms {
		out = append(out, engine.VolumeMount{Name: m.Name, Path: m.Path})
	}
	return out
}

// CreateVolume implements sdk.VolumeTransport.
func (r *Runtime) CreateVolume(ctx context.Context, name string, sizeMB int) (*sdk.VolumeInfo, error) {
	v, err := r.engine.CreateVolume(ctx, name, sizeMB)
	if err != nil {
		return nil, err
	}
	return volumeInfo(v, true), nil
}

// ListVolumes implements sdk.VolumeTransport.
func (r *Runtime) ListVolumes(ctx context.Context) ([]sdk.VolumeInfo, error) {
	list, err := r.engine.ListVolumes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.VolumeInfo, 0, len(list))
	for _, v := range list {
		out = append(out, *volumeInfo(v, false))
	}
	return out, nil
}

// GetVolume implements sdk.VolumeTransport.
func (r *Runtime) GetVolume(ctx context.Context, id string) (*sdk.VolumeInfo, error) {
	v, err := r.engine.GetVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	return volumeInfo(v, true), nil
}

// DeleteVolume implements sdk.VolumeTransport.
func (r *Runtime) DeleteVolume(ctx context.Context, id string) error {
	return r.engine.DeleteVolume(ctx, id)
}

// withVolume runs fn on the content of v, opened with its token.
func (r *Runtime) withVolume(ctx context.Context, v *sdk.VolumeInfo, fn func(fs *volume.FS) error) error {
	fs, _, err := r.engine.OpenVolume(ctx, v.ID, v.Token)
	if err != nil {
		return err
	}
	defer fs.Close()
	return fn(fs)
}

// ListVolumeDir implements sdk.VolumeTransport.
func (r *Runtime) ListVolumeDir(ctx context.Context, v *sdk.VolumeInfo, path string, depth int) ([]sdk.VolumeEntry, error) {
	var out []sdk.VolumeEntry
	err := r.withVolume(ctx, v, func(fs *volume.FS) error {
		list, err := fs.List(path, depth)
		for i := range list {
			out = append(out, *volumeEntry(&list[i]))
		}
		return err
	})
	return out, err
}

// MakeVolumeDir implements sdk.VolumeTransport.
func (r *Runtime) MakeVolumeDir(ctx context.Context, v *sdk.VolumeInfo, path string, parents bool) (*sdk.VolumeEntry, error) {
	var out *sdk.VolumeEntry
	err := r.withVolume(ctx, v, func(fs *volume.FS) error {
		e, err := fs.MakeDir(path, volume.Attrs{}, parents)
		if err == nil {
			out = volumeEntry(e)
		}
		return err
	})
	return out, err
}

// StatVolumePath implements sdk.VolumeTransport.
func (r *Runtime) StatVolumePath(ctx context.Context, v *sdk.VolumeInfo, path string) (*sdk.VolumeEntry, error) {
	var out *sdk.VolumeEntry
	err := r.withVolume(ctx, v, func(fs *volume.FS) error {
		e, err := fs.Stat(path)
		if err == nil {
			out = volumeEntry(e)
		}
		return err
	})
	return out, err
}

// ReadVolumeFile implements sdk.VolumeTransport.
func (r *Runtime) ReadVolumeFile(ctx context.Context, v *sdk.VolumeInfo, path string) (io.ReadCloser, error) {
	fs, _, err := r.engine.OpenVolume(ctx, v.ID, v.Token)
	if err != nil {
		return nil, err
	}
	// The open file holds what it reads, whatever becomes of the root.
	defer fs.Close()
	f, _, err := fs.Read(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// WriteVolumeFile implements sdk.VolumeTransport.
func (r *Runtime) WriteVolumeFile(ctx context.Context, v *sdk.VolumeInfo, path string, data io.Reader) (*sdk.VolumeEntry, error) {
	var out *sdk.VolumeEntry
	err := r.withVolume(ctx, v, func(fs *volume.FS) error {
		e, err := fs.Write(path, data, volume.Attrs{})
		if err == nil {
			out = volumeEntry(e)
		}
		return err
	})
	return out, err
}

// RemoveVolumePath implements sdk.VolumeTransport.
func (r *Runtime) RemoveVolumePath(ctx context.Context, v *sdk.VolumeInfo, path string) error {
	return r.withVolume(ctx, v, func(fs *volume.FS) error { return fs.Remove(path) })
}
