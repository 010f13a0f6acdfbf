package engine

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/engine/store"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/volume"
)

// A volume is a directory on the host, capped in size, that sandboxes
// mount read-write at create (E2B's volumeMounts), several at once, and
// that outlives them: package volume keeps it under <root>/volumes/<id>,
// and the store its record. A volume is its team's, and its name unique
// within the team. A sandbox that mounts it (being created, running or
// paused), or a snapshot of one, holds it: a delete then refuses, and says
// which.
//
// A paused sandbox's checkpoint (or a snapshot) names the files of its
// volumes that its processes held open or worked in, and gVisor finds them
// again by path when it restores: if another sandbox or the content
// routes removed one meanwhile, the resume fails with runsc's error naming
// that path, and succeeds once something is there again. Nothing else of
// a volume's content is in a checkpoint: a restored sandbox sees the
// volume as it is now.

// Volume is a volume's record as the engine keeps it.
type Volume = store.Volume

// VolumeMount is a volume mounted into a sandbox: a create names the
// volume (Name) and where it goes (Path); the record adds VolumeID.
type VolumeMount = store.VolumeMount

// Bounds of volumes.
const (
	// DefaultVolumeMB is the size of a volume whose create names none.
	DefaultVolumeMB = 1 << 10
	// MaxVolumeMB is the largest volume a create may ask for; the host
	// must have its size free, too, when it is made.
	MaxVolumeMB = 100 << 10
	// MaxVolumesPerTeam bounds the volumes of a team: each holds a loop
	// device and a mount while the daemon runs.
	MaxVolumesPerTeam = 100
	// maxVolumeMounts bounds the volumes of one sandbox.
	maxVolumeMounts = 16
	// maxMountPath bounds a mount path.
	maxMountPath = 1024
)

// volumeName is what a volume may be named: no '/', no leading '.', so a
// name is never a path.
var volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// reservedMountDirs are the sandbox's directories that no volume may be
// mounted on or under: the kernel's, and the agent's own.
var reservedMountDirs = []string{"/proc", "/dev", "/sys", backend.AgentMountDir}

// reservedMountPaths are paths a volume may not replace: the root, and
// /etc with the network files the agent writes at boot and restore.
var reservedMountPaths = []string{"/", "/etc", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname"}

func (e *Engine) volumeDir(id string) string { return filepath.Join(e.cfg.Root, "volumes", id) }

// scopeTeam is the team of the calls on ctx: its scope's, else the
// default team.
func scopeTeam(ctx context.Context) string {
	if s, ok := ScopeFrom(ctx); ok {
		return s.Team
	}
	return DefaultTeam
}

// volumeVisible reports whether a call on ctx may see v.
func volumeVisible(ctx context.Context, v *Volume) bool {
	s, ok := ScopeFrom(ctx)
	return !ok || s.Team == v.Team
}

// errUnknownVolume answers for a volume that does not exist, or that the
// caller's scope does not cover: the two must read the same.
func errUnknownVolume(ref string) error {
	return fmt.Errorf("volume %q: %w", ref, errdefs.ErrNotFound)
}

// CreateVolume makes a volume named name, of sizeMB (zero means
// DefaultVolumeMB), for the team of ctx's scope. A name the team has
// already fails with errdefs.ErrAlreadyExists.
func (e *Engine) CreateVolume(ctx context.Context, name string, sizeMB int) (*Volume, error) {
	if !volumeName.MatchString(name) {
		return nil, fmt.Errorf("volume name %.80q: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	}
	if sizeMB == 0 {
		sizeMB = DefaultVolumeMB
	}
	if sizeMB < volume.MinSize>>20 || sizeMB > MaxVolumeMB {
		return nil, fmt.Errorf("volume size %d MB: from %d to %d MB: %w", sizeMB, volume.MinSize>>20, MaxVolumeMB, errdefs.ErrInvalidArgument)
	}
	size := int64(sizeMB) << 20
	v := &Volume{
		ID: newID(), Team: scopeTeam(ctx), Name: name, Token: newToken(),
		SizeBytes: size, CreatedAt: time.Now().UTC(), State: store.VolumeCreating,
	}
	if s, ok := ScopeFrom(ctx); ok {
		v.Creator = s.Key
	}
	have, err := e.store.ListVolumes(ctx, v.Team)
	if err != nil {
		return nil, err
	}
	if len(have) >= MaxVolumesPerTeam {
		return nil, fmt.Errorf("volume %q: the team has %d volumes, the most it may: delete one first: %w", name, len(have), errdefs.ErrFailedPrecondition)
	}
	parent := filepath.Join(e.cfg.Root, "volumes")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	// The file is sparse: the host gives the space as the volume fills.
	// What it cannot give at all is refused now.
	if free, err := freeBytes(parent); err == nil && free < size {
		return nil, fmt.Errorf("volume %q of %d MB: the host's disk has %d MB free: %w", name, sizeMB, free>>20, errdefs.ErrResourceExhausted)
	}
	// The record first, claiming the name; a crash before it is ready
	// leaves a "creating" record that the next start cleans up.
	if err := e.store.InsertVolume(ctx, v); err != nil {
		return nil, err
	}
	// Made on the engine's time: a caller that goes away must not leave
	// half a volume.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := volume.Create(mctx, e.volumeDir(v.ID), size); err != nil {
		e.store.DeleteVolume(mctx, v.ID)
		return nil, fmt.Errorf("volume %q: %w", name, e.explainDiskFull(err))
	}
	if err := e.store.SetVolumeState(mctx, v.ID, store.VolumeReady); err != nil {
		volume.Remove(e.volumeDir(v.ID))
		e.store.DeleteVolume(mctx, v.ID)
		return nil, fmt.Errorf("volume %q: %w", name, err)
	}
	v.State = store.VolumeReady
	e.log.Info("volume created", "volume", v.ID, "name", name, "team", v.Team, "bytes", size)
	return v, nil
}

// ListVolumes returns the ready volumes within the scope of ctx, oldest
// first.
func (e *Engine) ListVolumes(ctx context.Context) ([]*Volume, error) {
	team := ""
	if s, ok := ScopeFrom(ctx); ok {
		team = s.Team
	}
	all, err := e.store.ListVolumes(ctx, team)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, v := range all {
		if v.State == store.VolumeReady {
			out = append(out, v)
		}
	}
	return out, nil
}

// GetVolume returns volume id if the scope of ctx covers it and it is
// ready, else an error of class errdefs.ErrNotFound.
func (e *Engine) GetVolume(ctx context.Context, id string) (*Volume, error) {
	v, err := e.store.GetVolume(ctx, id)
	if errdefs.IsNotFound(err) || err == nil && (!volumeVisible(ctx, v) || v.State != store.VolumeReady) {
		return nil, errUnknownVolume(id)
	}
	return v, err
}

// VolumeUsage reports how much of volume id is taken.
func (e *Engine) VolumeUsage(ctx context.Context, id string) (volume.Usage, error) {
	v, err := e.GetVolume(ctx, id)
	if err != nil {
		return volume.Usage{}, err
	}
	dir := e.volumeDir(v.ID)
	if err := volume.Mount(ctx, dir); err != nil {
		return volume.Usage{}, fmt.Errorf("volume %q: %w", id, err)
	}
	return volume.UsageOf(dir)
}

// DeleteVolume removes volume id and all it holds. A volume that a
// sandbox not killed or a snapshot mounts is kept, and the delete fails
// with errdefs.ErrFailedPrecondition naming them.
func (e *Engine) DeleteVolume(ctx context.Context, id string) error {
	v, err := e.store.GetVolume(ctx, id)
	if errdefs.IsNotFound(err) || err == nil && !volumeVisible(ctx, v) {
		return errUnknownVolume(id)
	}
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	// Marked first, then checked: a create records its sandbox and then
	// checks the volume is still there (holdVolumes), so either it sees
	// the mark and gives up, or the check here sees its sandbox.
	if err := e.store.SetVolumeState(ctx, v.ID, store.VolumeDeleting); err != nil {
		return err
	}
	sandboxes, snapshots, err := e.store.VolumeHolders(ctx, v.ID)
	if err == nil && len(sandboxes)+len(snapshots) > 0 {
		err = errVolumeInUse(v, sandboxes, snapshots)
	}
	if err != nil {
		if serr := e.store.SetVolumeState(ctx, v.ID, store.VolumeReady); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	if err := volume.Remove(e.volumeDir(v.ID)); err != nil {
		// Left "deleting": hidden, and finished by the next delete or
		// start.
		return fmt.Errorf("volume %q: remove: %w", id, err)
	}
	if err := e.store.DeleteVolume(ctx, v.ID); err != nil {
		return err
	}
	e.log.Info("volume deleted", "volume", v.ID, "name", v.Name)
	return nil
}

func errVolumeInUse(v *Volume, sandboxes, snapshots []string) error {
	var held []string
	if len(sandboxes) > 0 {
		held = append(held, "sandboxes "+strings.Join(sandboxes, ", "))
	}
	if len(snapshots) > 0 {
		held = append(held, "snapshots "+strings.Join(snapshots, ", "))
	}
	return fmt.Errorf("volume %q (%s) is in use by %s: kill those sandboxes and delete those snapshots first: %w",
		v.Name, v.ID, strings.Join(held, " and "), errdefs.ErrFailedPrecondition)
}

// MountVolumes mounts every ready volume (after a restart of the host,
// none is), so that the sandboxes the engine resumes or starts from
// snapshots find theirs, and finishes the creates and deletes that a
// crash cut short. A volume that cannot be mounted is logged and left:
// its sandboxes fail to start, saying so.
func (e *Engine) MountVolumes(ctx context.Context) error {
	all, err := e.store.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	for _, v := range all {
		dir := e.volumeDir(v.ID)
		switch v.State {
		case store.VolumeReady:
			if err := volume.Mount(ctx, dir); err != nil {
				e.log.Error("mount volume", "volume", v.ID, "name", v.Name, "err", err)
			}
		case store.VolumeCreating:
			if err := volume.Remove(dir); err != nil {
				e.log.Error("remove half-made volume", "volume", v.ID, "err", err)
				continue
			}
			if err := e.store.DeleteVolume(ctx, v.ID); err != nil {
				return err
			}
		case store.VolumeDeleting:
			if err := e.DeleteVolume(ctx, v.ID); err != nil {
				e.log.Warn("finish deleting volume", "volume", v.ID, "err", err)
				if errors.Is(err, errdefs.ErrFailedPrecondition) {
					// In use after all: DeleteVolume made it ready again.
					if err := volume.Mount(ctx, dir); err != nil {
						e.log.Error("mount volume", "volume", v.ID, "name", v.Name, "err", err)
					}
				}
			}
		}
	}
	return nil
}

// OpenVolume opens the content of volume id for a client that shows
// token, the volume's own: the content routes take no API key. A wrong
// token and an unknown volume both fail with errdefs.ErrUnauthenticated.
// The caller closes the FS.
func (e *Engine) OpenVolume(ctx context.Context, id, token string) (*volume.FS, *Volume, error) {
	v, err := e.store.GetVolume(ctx, id)
	if err != nil && !errdefs.IsNotFound(err) {
		return nil, nil, err
	}
	if err != nil || v.State != store.VolumeReady || token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(v.Token)) != 1 {
		return nil, nil, fmt.Errorf("volume %q: no such volume, or the token is not its own (Volume.connect gets it): %w", id, errdefs.ErrUnauthenticated)
	}
	dir := e.volumeDir(v.ID)
	if err := volume.Mount(ctx, dir); err != nil {
		return nil, nil, fmt.Errorf("volume %q: %w", id, err)
	}
	fs, err := volume.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("volume %q: %w", id, err)
	}
	return fs, v, nil
}

// resolveMounts checks the volume mounts a create on ctx asks for and
// names the volumes they mean, of team: each must be ready, and mounted
// on the host for the sandbox to bind.
func (e *Engine) resolveMounts(ctx context.Context, team string, mounts []VolumeMount) ([]VolumeMount, error) {
	if len(mounts) == 0 {
		return nil, nil
	}
	if len(mounts) > maxVolumeMounts {
		return nil, fmt.Errorf("create: %d volume mounts, at most %d: %w", len(mounts), maxVolumeMounts, errdefs.ErrInvalidArgument)
	}
	out := make([]VolumeMount, 0, len(mounts))
	for _, m := range mounts {
		p, err := checkMountPath(m.Path)
		if err != nil {
			return nil, err
		}
		for _, o := range out {
			if o.Path == p || strings.HasPrefix(p, o.Path+"/") || strings.HasPrefix(o.Path, p+"/") {
				return nil, fmt.Errorf("create: volume mounts at %s and %s: one path is at or under the other: %w", o.Path, p, errdefs.ErrInvalidArgument)
			}
		}
		v, err := e.store.GetVolumeByName(ctx, team, m.Name)
		if err != nil && errdefs.IsNotFound(err) {
			// A volume's id names it too.
			if byID, ierr := e.store.GetVolume(ctx, m.Name); ierr == nil && byID.Team == team {
				v, err = byID, nil
			}
		}
		if err == nil && v.State != store.VolumeReady {
			err = errdefs.ErrNotFound
		}
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("create: volume %.80q does not exist: make it first (Volume.create): %w", m.Name, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		if err := volume.Mount(ctx, e.volumeDir(v.ID)); err != nil {
			return nil, fmt.Errorf("create: volume %q: %w", m.Name, err)
		}
		out = append(out, VolumeMount{Name: v.Name, VolumeID: v.ID, Path: p})
	}
	return out, nil
}

// checkMountPath returns the clean form of p, a path in the sandbox to
// mount a volume at, or why it may not be one.
func checkMountPath(p string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("create: volume mount path %.80q: %s: %w", p, why, errdefs.ErrInvalidArgument)
	}
	if !strings.HasPrefix(p, "/") {
		return "", bad("it must be absolute")
	}
	if len(p) > maxMountPath {
		return "", bad(fmt.Sprintf("it is longer than %d bytes", maxMountPath))
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", bad("it holds control characters")
	}
	c := path.Clean(p)
	for _, r := range reservedMountPaths {
		if c == r {
			return "", bad("the sandbox needs what is there")
		}
	}
	for _, d := range reservedMountDirs {
		if c == d || strings.HasPrefix(c, d+"/") {
			return "", bad(d + " is the sandbox's own")
		}
	}
	return c, nil
}

// holdVolumes checks, once the record of sb (which mounts them) is in
// the store, that its volumes are still there: a delete that began
// meanwhile either sees the record, or is seen here.
func (e *Engine) holdVolumes(ctx context.Context, sb *Sandbox) error {
	for _, m := range sb.VolumeMounts {
		v, err := e.store.GetVolume(ctx, m.VolumeID)
		if err == nil && v.State != store.VolumeReady {
			err = errdefs.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("create: volume %q: it is being deleted: %w", m.Name, err)
		}
	}
	return nil
}

// volumeMounts are the backend's mounts of sb's volumes.
func (e *Engine) volumeMounts(sb *Sandbox) []backend.Mount {
	var out []backend.Mount
	for _, m := range sb.VolumeMounts {
		out = append(out, backend.Mount{Source: volume.DataDir(e.volumeDir(m.VolumeID)), Destination: m.Path})
	}
	return out
}
