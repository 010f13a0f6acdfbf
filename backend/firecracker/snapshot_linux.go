package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/backend/internal/oci"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/cleanup"
	"github.com/lightbearco/tupper/network"
)

var _ backend.Checkpointer = (*Backend)(nil)

// snapshotTimeout bounds the API calls of a checkpoint or a restore: the
// VMM writes (or maps) the whole guest memory.
const snapshotTimeout = 5 * time.Minute

// Checkpoint implements backend.Checkpointer: checkpoint, then the
// sandbox resumed (keep) or stopped.
func (b *Backend) Checkpoint(ctx context.Context, id, dir string, keep bool) error {
	if err := b.checkpoint(ctx, id, dir); err != nil {
		return err
	}
	if keep {
		return b.Resume(ctx, id)
	}
	return b.Stop(ctx, id)
}

// checkpoint pauses sandbox id (if it runs), has Firecracker write a full snapshot (the microVM's state and
// its whole memory) into the VMM's root, moves both into dir with a copy
// of the writable disk (reflinked where the file system can), and writes
// dir's manifest last: a directory without one holds no checkpoint. dir is
// made if missing; a checkpoint already there is replaced.
//
// The sandbox is left paused: its caller stops it, and the checkpoint
// holds it, or resumes it, and then it and any restore of the checkpoint
// share what the guest held unique (Firecracker's "snapshot security and
// uniqueness"). Firecracker resets the guest's vsock connections when it
// writes the snapshot: connections to the sandbox are closed either way.
//
// A failed Checkpoint removes what it wrote (and dir, if it made it), and
// resumes the sandbox if it paused it. It fails with errdefs.ErrNotFound
// for an id the backend does not hold and errdefs.ErrFailedPrecondition
// for a sandbox that is not running or paused.
func (b *Backend) checkpoint(ctx context.Context, id, dir string) (retErr error) {
	if err := network.ValidateID(id); err != nil {
		return err
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("sandbox %q: checkpoint directory %q must be absolute: %w", id, dir, errdefs.ErrInvalidArgument)
	}
	defer b.locks.Lock(id)()
	log := b.log.With("sandbox", id, "op", "checkpoint")
	begin := time.Now()
	rec, err := b.readRecord(id)
	if err != nil {
		return err
	}
	if pid, err := oci.ReadPid(filepath.Join(b.sandboxDir(id), pidFile)); err != nil || !alive(pid) || !ownsProcess(pid, id) {
		return fmt.Errorf("sandbox %q: checkpoint: its VMM has exited: %w", id, errdefs.ErrFailedPrecondition)
	}
	api := newAPIClient(b.apiSockPath(id))
	defer api.close()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
	defer cancel()
	info, err := api.info(actx)
	if err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if info.State != instanceRunning && info.State != instancePaused {
		return fmt.Errorf("sandbox %q: checkpoint: the microVM is %q: %w", id, info.State, errdefs.ErrFailedPrecondition)
	}

	var undo cleanup.Stack
	defer func() {
		if retErr == nil {
			return
		}
		if err := undo.Run(); err != nil {
			log.Error("undo of a failed checkpoint left something behind", "err", err)
			retErr = errors.Join(retErr, fmt.Errorf("cleanup: %w", err))
		}
		log.Info("checkpoint failed", "dir", dir, "err", retErr, "took", time.Since(begin))
	}()
	step := func(name string) error {
		if b.failAt == name {
			return fmt.Errorf("sandbox %q: injected failure after step %s", id, name)
		}
		return nil
	}

	if info.State == instanceRunning {
		if err := api.pause(actx); err != nil {
			return fmt.Errorf("sandbox %q: checkpoint: pause: %w", id, err)
		}
		undo.Add(func() error {
			rctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
			defer cancel()
			return api.resume(rctx)
		})
	}
	if err := step("pause"); err != nil {
		return err
	}

	// Firecracker writes where it can: in its own root.
	root := b.vmRoot(id)
	stateFile, memFile := filepath.Join(root, ckptStateName), filepath.Join(root, ckptMemName)
	undo.Add(func() error { return removeFiles(stateFile, memFile) })
	if err := api.createSnapshot(actx, b.guestPath(ckptStateName), b.guestPath(ckptMemName)); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if err := step("snapshot"); err != nil {
		return err
	}

	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		undo.Add(func() error { return os.RemoveAll(dir) })
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	// An older checkpoint in dir stops being one before its files go.
	if err := os.Remove(filepath.Join(dir, manifestName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	undo.Add(func() error {
		var paths []string
		for _, name := range snapshotFiles {
			paths = append(paths, filepath.Join(dir, name), filepath.Join(dir, name+".tmp"))
		}
		return removeFiles(paths...)
	})
	for src, name := range map[string]string{stateFile: snapStateName, memFile: snapMemName} {
		if err := moveFile(src, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
		}
	}
	if err := step("memory"); err != nil {
		return err
	}
	// The guest cannot write while paused: the copy is the disk the
	// snapshot's memory knows.
	if err := copyInto(filepath.Join(root, rwDiskName), filepath.Join(dir, rwDiskName)); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: writable disk: %w", id, err)
	}
	if err := step("disk"); err != nil {
		return err
	}

	m := manifest{
		Format: snapshotFormat, Backend: "firecracker", ID: id, CreatedAt: time.Now().UTC(),
		VMMVersion: info.VMMVersion, AgentSum: rec.AgentSum, ImageKey: rec.ImageKey, ChainID: rec.ChainID,
		Jailed: rec.Jailed, VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, CPUs: rec.CPUs, DiskBytes: rec.DiskBytes,
	}
	for _, name := range snapshotFiles {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
		}
		m.Files = append(m.Files, manifestFile{Name: name, Size: fi.Size()})
	}
	if err := writeFileAtomic(filepath.Join(dir, manifestName), m); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if err := step("manifest"); err != nil {
		return err
	}
	undo.Release()
	log.Info("checkpoint made", "dir", dir, "memMiB", rec.MemoryMiB, "took", time.Since(begin))
	return nil
}

// Restore implements backend.Checkpointer: it boots sandbox spec.ID from
// the checkpoint in dir in a new VMM. It refuses, with
// errdefs.ErrFailedPrecondition, a checkpoint made by another format of
// this backend or another Firecracker, for another image than spec's or
// with another agent than spec's (when spec names one), or made with the
// jailer for a backend without, or the other way. The sandbox gets the
// checkpoint's vCPUs, memory, disk size and cpu quota whatever
// spec.Resources says, and keeps its guest's host name, environment and
// agent.
//
// Its steps are Start's, with the snapshot for the initramfs and the
// boot: claim the sandbox directory; find (or make) the image disk from
// spec; fill the VMM's root with the image disk, the snapshot's state and
// memory files (linked, or copied across file systems; readable by the
// jailed VMM's group, not writable) and a copy of the checkpoint's
// writable disk; start the VMM in its cgroup; check its version; load the
// snapshot and resume the microVM; record it. A failure undoes the steps
// done and leaves dir as it was. The guest's vsock connections are closed
// by the restore: callers dial the agent again.
func (b *Backend) Restore(ctx context.Context, spec *backend.Spec, dir string) (_ *backend.Sandbox, retErr error) {
	if spec == nil {
		return nil, fmt.Errorf("firecracker restore: nil spec: %w", errdefs.ErrInvalidArgument)
	}
	if err := validateRestoreSpec(spec); err != nil {
		return nil, err
	}
	id := spec.ID
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("sandbox %q: checkpoint directory %q must be absolute: %w", id, dir, errdefs.ErrInvalidArgument)
	}
	m, err := readManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	target := restoreTarget{Jailed: b.jailer != ""}
	if target.ImageKey, err = imageKey(spec); err != nil {
		return nil, fmt.Errorf("sandbox %q: image disk: %w", id, err)
	}
	if spec.Agent.Path != "" {
		if target.AgentSum, err = b.agentSum(spec.Agent.Path); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", id, err)
		}
	}
	if err := m.check(dir, target); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}

	defer b.locks.Lock(id)()
	l := b.newLaunch(id, "restore")
	defer l.end(&retErr)

	t := time.Now()
	if err := b.claim(id, &l.undo); err != nil {
		return nil, err
	}
	if err := l.step("claim", t); err != nil {
		return nil, err
	}
	t = time.Now()
	key, baseDisk, err := b.baseDisk(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("image disk", t); err != nil {
		return nil, err
	}

	t = time.Now()
	root := b.vmRoot(id)
	uid, gid, err := b.fillRoot(id, map[string]string{
		baseDiskName:     baseDisk,
		restoreStateName: filepath.Join(dir, snapStateName),
		restoreMemName:   filepath.Join(dir, snapMemName),
	}, &l.undo)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{restoreStateName, restoreMemName} {
		// The jailed VMM reads them as its group; the memory must stay
		// as it is while the guest runs on it.
		p := filepath.Join(root, name)
		if err := os.Chown(p, os.Getuid(), gid); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", id, err)
		}
		if err := os.Chmod(p, 0o640); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", id, err)
		}
	}
	if err := l.step(b.rootStep(), t); err != nil {
		return nil, err
	}

	t = time.Now()
	rwDisk := filepath.Join(root, rwDiskName)
	if err := copyInto(filepath.Join(dir, rwDiskName), rwDisk); err != nil {
		return nil, fmt.Errorf("sandbox %q: writable disk: %w", id, err)
	}
	if err := os.Chown(rwDisk, uid, gid); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := l.step("writable disk", t); err != nil {
		return nil, err
	}

	lim := limits{CPUs: m.CPUs, MemoryBytes: m.MemoryMiB << 20, DiskBytes: m.DiskBytes}
	vmm, err := b.startVMM(ctx, l, uid, gid, lim)
	if err != nil {
		return nil, err
	}
	defer vmm.api.close()

	t = time.Now()
	if vmm.version != m.VMMVersion {
		return nil, fmt.Errorf("sandbox %q: checkpoint %s was made by Firecracker %s, this one is %s: %w", id, dir, m.VMMVersion, vmm.version, errdefs.ErrFailedPrecondition)
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
	defer acancel()
	if err := vmm.api.loadSnapshot(actx, b.guestPath(restoreStateName), b.guestPath(restoreMemName)); err != nil {
		return nil, fmt.Errorf("sandbox %q: load the snapshot: %w: %s", id, err, oci.Tail(filepath.Join(b.sandboxDir(id), consoleFile), 2048))
	}
	if err := l.step("load", t); err != nil {
		return nil, err
	}

	rec := record{
		Jailed: b.jailer != "", UID: uid, VCPUs: m.VCPUs, MemoryMiB: m.MemoryMiB, CPUs: m.CPUs,
		DiskBytes: m.DiskBytes, ImageKey: key, AgentSum: m.AgentSum, VMMVersion: vmm.version,
		ChainID: m.ChainID, Labels: spec.Labels, RestoredFrom: dir,
	}
	return b.finish(l, vmm.pid, rec)
}

// validateRestoreSpec checks what Restore uses of spec: its id and root,
// and its agent when it names one.
func validateRestoreSpec(s *backend.Spec) error {
	if err := network.ValidateID(s.ID); err != nil {
		return err
	}
	if !filepath.IsAbs(s.RootFS) {
		return fmt.Errorf("sandbox %q: RootFS %q must be absolute: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(s.RootFS); err != nil {
		return fmt.Errorf("sandbox %q: RootFS: %w: %w", s.ID, errdefs.ErrNotFound, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("sandbox %q: RootFS %s is not a directory: %w", s.ID, s.RootFS, errdefs.ErrInvalidArgument)
	}
	if s.Agent.Path != "" && !filepath.IsAbs(s.Agent.Path) {
		return fmt.Errorf("sandbox %q: agent path %q must be absolute: %w", s.ID, s.Agent.Path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// moveFile moves src to dst (renamed where they share a file system,
// else copied and removed), the daemon's own with mode 0600, through
// dst.tmp: dst is always whole.
func moveFile(src, dst string) error {
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := os.Rename(src, tmp); err != nil {
		if !errors.Is(err, unix.EXDEV) {
			return err
		}
		if err := copyFile(src, tmp); err != nil {
			return err
		}
		os.Remove(src)
	}
	if err := os.Chown(tmp, os.Getuid(), os.Getgid()); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// copyInto copies src to dst through dst.tmp, mode 0600.
func copyInto(src, dst string) error {
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := copyFile(src, tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// copyFile copies src to the new file dst: a reflink where the file system
// shares blocks (btrfs, XFS), else a copy that keeps holes, as sparse disks
// and mostly untouched memory have.
func copyFile(src, dst string) error {
	out, err := exec.Command("cp", "--reflink=auto", "--sparse=always", "--", src, dst).CombinedOutput()
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("copy %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeFileAtomic writes v as JSON to path through path.tmp.
func writeFileAtomic(path string, v any) error {
	tmp := path + ".tmp"
	if err := oci.WriteJSON(tmp, v); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// removeFiles removes each path; missing ones are fine.
func removeFiles(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
