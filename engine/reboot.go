package engine

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/lightbearco/tupper/backend"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/image"
)

// A pause of files alone (E2B's autoPauseMemory false, or pause with
// keepMemory false) keeps what the sandbox changed in its files, as an
// image layer (backend.Exporter) in <root>/paused/<id>/files.tar; its
// resume commits that layer onto the sandbox's image and boots a fresh
// sandbox, same id and token, on the result. So does a resume that asks
// for a reboot of a sandbox paused with its memory, after taking its files
// out of the checkpoint.

// filesName is the layer of a pause of files alone.
const filesName = "files.tar"

// ImageCommitter is an Images that can stack a layer on an image (see
// image.Store.Commit) and drop an image's name. Pauses of files alone
// need it; *image.Store implements it.
type ImageCommitter interface {
	Commit(ctx context.Context, opts image.CommitOptions) (*image.Image, error)
	Remove(ctx context.Context, name string) error
}

// filesSaver returns l's backend as a backend.Exporter, or why files
// cannot be kept alone. The caller holds e.mu.
func (e *Engine) filesSaver(l *liveSandbox) (backend.Exporter, error) {
	ex, ok := l.be.(backend.Exporter)
	if !ok {
		return nil, fmt.Errorf("pause of files alone: the %s backend cannot export a sandbox's files (gvisor can): %w", l.beName, errdefs.ErrNotSupported)
	}
	if _, ok := e.cfg.Images.(ImageCommitter); !ok {
		return nil, fmt.Errorf("pause of files alone: the image store cannot commit: %w", errdefs.ErrNotSupported)
	}
	return ex, nil
}

// saveFiles writes running sandbox id's changed files into dir, then stops
// it.
func (e *Engine) saveFiles(ctx context.Context, l *liveSandbox, id, dir string) error {
	e.mu.Lock()
	ex, err := e.filesSaver(l)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if err := exportTo(ctx, ex, id, dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := l.be.Stop(ctx, id); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("stop after saving its files: %w", err)
	}
	return nil
}

// exportTo writes sandbox id's changed files into dir/files.tar; dir is
// made.
func exportTo(ctx context.Context, ex backend.Exporter, id, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, filesName), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := ex.ExportChanges(ctx, id, f); err != nil {
		f.Close()
		return fmt.Errorf("save its files: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// reboot boots paused sandbox rec (its entry l, whose op the caller holds)
// anew on its saved files, and sets rec.ImageID to the image it now runs
// on: its image with those files as one more layer.
func (e *Engine) reboot(ctx context.Context, l *liveSandbox, rec *Sandbox) (*backend.Sandbox, error) {
	e.mu.Lock()
	ex, err := e.filesSaver(l)
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	dir := e.checkpointDir(rec.ID)
	files := filepath.Join(dir, filesName)
	if _, err := os.Stat(files); err != nil {
		// Paused with its memory: its files are in the checkpoint.
		cp, err := checkpointer(l.be, l.beName, "reboot")
		if err != nil {
			return nil, err
		}
		if _, err := e.restore(ctx, l.be, cp, rec, dir, rec.AccessToken); err != nil {
			return nil, fmt.Errorf("take its files out of its checkpoint: %w", err)
		}
		err = exportTo(ctx, ex, rec.ID, dir)
		if serr := l.be.Stop(context.WithoutCancel(ctx), rec.ID); err == nil && serr != nil {
			err = serr
		}
		if err != nil {
			return nil, fmt.Errorf("take its files out of its checkpoint: %w", err)
		}
	}
	committer := e.cfg.Images.(ImageCommitter)
	name := rebootImageName(rec.ID)
	img, err := committer.Commit(ctx, image.CommitOptions{
		Parent: rec.ImageID, Layer: files, CreatedBy: "the files of sandbox " + rec.ID, Names: []string{name}, Unpack: true,
		// The image holds what the sandbox wrote, and its name is the
		// sandbox's id, which public URLs show: it is the team's alone.
		Edit: func(c *v1.Config) {
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			c.Labels[LabelTeam] = cmp.Or(rec.Team, DefaultTeam)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("stack its files on its image: %w", e.explainDiskFull(err))
	}
	// The image keeps its name (the store finds images by name or id
	// only while they have one) until the sandbox is killed
	// (dropRebootImage).
	old := rec.ImageID
	rec.ImageID = img.ID
	if err := e.leaseImage(ctx, rec); err != nil {
		rec.ImageID = old
		committer.Remove(context.WithoutCancel(ctx), name)
		return nil, err
	}
	bootCtx, cancel := context.WithTimeout(e.bg, e.cfg.BootTimeout)
	defer cancel()
	started, err := l.be.Start(bootCtx, e.specFor(rec, img))
	if err == nil {
		booted := *rec
		booted.AgentAddr, booted.Pid = started.AgentAddr, started.Pid
		err = e.waitAgent(bootCtx, l.be, &booted)
	}
	if err != nil {
		e.cleanup(context.WithoutCancel(ctx), l.be, rec.ID)
		rec.ImageID = old
		if lerr := e.leaseImage(context.WithoutCancel(ctx), rec); lerr != nil {
			e.log.Warn("lease back the image of a sandbox whose reboot failed", "sandbox", rec.ID, "err", lerr)
		}
		if !rec.Rebooted {
			// Its record will not say Rebooted: the name goes now.
			e.dropRebootImage(context.WithoutCancel(ctx), rec.ID)
		}
		return nil, err
	}
	return started, nil
}

// rebootImageName names the image a reboot of sandbox id made.
func rebootImageName(id string) string { return "tupper-paused/" + id }

// dropRebootImage drops the name of the image a reboot of sandbox id
// made (its record says Rebooted), once the sandbox is gone: the store
// collects it.
func (e *Engine) dropRebootImage(ctx context.Context, id string) {
	c, ok := e.cfg.Images.(ImageCommitter)
	if !ok {
		return
	}
	if err := c.Remove(ctx, rebootImageName(id)); err != nil && !errdefs.IsNotFound(err) {
		e.log.Warn("drop the image of a rebooted sandbox", "sandbox", id, "err", err)
	}
}
