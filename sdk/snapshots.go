package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// A sandbox can be saved, with its processes, memory and files, in three
// ways, all through a CheckpointTransport: paused (saved and stopped, to
// be brought back by Connect), snapshotted (saved while it runs on, to
// start new sandboxes from, as from a template), or forked (new sandboxes
// started at once from it as it is now).

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	// SnapshotID is what CreateOptions.Template names to start from it.
	SnapshotID string
	// Names are other names CreateOptions.Template may give it.
	Names []string
	// SandboxID is the sandbox it was made of; CreatedAt when;
	// SizeBytes what it takes on disk. Tupper's extensions: empty from
	// servers that do not say.
	SandboxID string
	CreatedAt time.Time
	SizeBytes int64
}

// SnapshotListOptions filters a listing of snapshots.
type SnapshotListOptions struct {
	// SandboxID keeps the snapshots made of this sandbox; Name those
	// with this name.
	SandboxID string
	Name      string
	// Limit is the page size; 0 means the server's default.
	Limit int
	// NextToken continues an earlier listing.
	NextToken string
}

// ForkResult is one sandbox of a fork: the new sandbox, ready for
// commands and files, or the error that kept it from starting.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// PauseOption is a per-call option of Pause.
type PauseOption func(*pauseOptions)

type pauseOptions struct {
	filesOnly bool
}

// PauseFilesOnly asks for a pause that keeps the sandbox's files alone, as
// E2B's pause with memory false does: Connect then boots it afresh. Tupper
// keeps the memory all the same.
func PauseFilesOnly() PauseOption {
	return func(o *pauseOptions) { o.filesOnly = true }
}

// Pause saves the sandbox to disk, with its processes, memory and files,
// and frees the memory and CPU it held. A paused sandbox answers no
// command or file call (unless it was created with AutoResume, which
// wakes it); it does not time out, and stays until Client.Connect (or
// Resume) brings it back as it was, or Kill removes it. The Sandbox value
// works again once the sandbox is resumed. Pausing a sandbox that is not
// running fails with an error of class errdefs.ErrFailedPrecondition.
func (s *Sandbox) Pause(ctx context.Context, opts ...PauseOption) error {
	return s.client.Pause(ctx, s.ID(), opts...)
}

// CreateSnapshot saves the sandbox as it is now, while it runs on, as a
// snapshot: a sandbox created with the snapshot's id (or name) as its
// Template starts with these processes, memory and files, and an id and
// access token of its own. name is optional and unique among the
// snapshots; an existing one fails with an error of class
// errdefs.ErrAlreadyExists.
func (s *Sandbox) CreateSnapshot(ctx context.Context, name string) (*SnapshotInfo, error) {
	return s.client.CreateSnapshot(ctx, s.ID(), name)
}

// Fork starts count new sandboxes from the sandbox as it is now, which
// runs on. Each has its processes, memory and files, and an id, access
// token and network of its own, and lives timeout (0: what the sandbox
// was created with). Each result stands on its own: some may fail while
// others start, so look at every Err. The error is for the fork as a
// whole.
func (s *Sandbox) Fork(ctx context.Context, count int, timeout time.Duration) ([]ForkResult, error) {
	return s.client.Fork(ctx, s.ID(), count, timeout)
}

func (c *Client) checkpointTransport(op string) (Transport, CheckpointTransport, error) {
	t, err := c.transport()
	if err != nil {
		return nil, nil, err
	}
	ct, ok := t.(CheckpointTransport)
	if !ok {
		return nil, nil, fmt.Errorf("%s: this transport cannot save sandboxes: %w", op, errdefs.ErrNotSupported)
	}
	return t, ct, nil
}

// Pause pauses sandbox id (see Sandbox.Pause).
func (c *Client) Pause(ctx context.Context, id string, opts ...PauseOption) error {
	var o pauseOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	_, ct, err := c.checkpointTransport(fmt.Sprintf("pause sandbox %q", id))
	if err != nil {
		return err
	}
	if err := ct.PauseSandbox(ctx, id, !o.filesOnly); err != nil {
		return fmt.Errorf("pause sandbox %q: %w", id, err)
	}
	return nil
}

// Resume returns sandbox id running, resuming it when it is paused, as
// Connect does; timeout, when positive, is its time to live from now
// (that of a sandbox that runs already is lengthened, never shortened).
func (c *Client) Resume(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("resume sandbox %q: timeout %v is negative: %w", id, timeout, errdefs.ErrInvalidArgument)
	}
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	info, err := t.ConnectSandbox(ctx, id, timeout)
	if err != nil {
		return nil, fmt.Errorf("resume sandbox %q: %w", id, err)
	}
	sb, err := c.open(ctx, t, info)
	if err != nil {
		return nil, fmt.Errorf("resume sandbox %q: %w", id, err)
	}
	return sb, nil
}

// CreateSnapshot snapshots sandbox id (see Sandbox.CreateSnapshot).
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (*SnapshotInfo, error) {
	_, ct, err := c.checkpointTransport(fmt.Sprintf("snapshot sandbox %q", id))
	if err != nil {
		return nil, err
	}
	sn, err := ct.CreateSnapshot(ctx, id, name)
	if err != nil {
		return nil, fmt.Errorf("snapshot sandbox %q: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots returns one page of snapshots, oldest first, and the token
// of the next page, which is empty on the last page.
func (c *Client) ListSnapshots(ctx context.Context, opts SnapshotListOptions) ([]SnapshotInfo, string, error) {
	_, ct, err := c.checkpointTransport("list snapshots")
	if err != nil {
		return nil, "", err
	}
	page, err := ct.ListSnapshots(ctx, SnapshotQuery(opts))
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	return page.Snapshots, page.NextToken, nil
}

// DeleteSnapshot removes the snapshot that ref (its id or one of its
// names) names. Sandboxes started from it run on. An unknown snapshot is
// an error of class errdefs.ErrNotFound.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	_, ct, err := c.checkpointTransport(fmt.Sprintf("delete snapshot %q", ref))
	if err != nil {
		return err
	}
	if err := ct.DeleteSnapshot(ctx, ref); err != nil {
		return fmt.Errorf("delete snapshot %q: %w", ref, err)
	}
	return nil
}

// Fork forks sandbox id (see Sandbox.Fork).
func (c *Client) Fork(ctx context.Context, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if count < 1 {
		return nil, fmt.Errorf("fork sandbox %q: count %d must be at least 1: %w", id, count, errdefs.ErrInvalidArgument)
	}
	if timeout < 0 {
		return nil, fmt.Errorf("fork sandbox %q: timeout %v is negative: %w", id, timeout, errdefs.ErrInvalidArgument)
	}
	t, ct, err := c.checkpointTransport(fmt.Sprintf("fork sandbox %q", id))
	if err != nil {
		return nil, err
	}
	forked, err := ct.ForkSandbox(ctx, id, count, timeout)
	if err != nil {
		return nil, fmt.Errorf("fork sandbox %q: %w", id, err)
	}
	out := make([]ForkResult, len(forked))
	for i, f := range forked {
		if f.Err != nil {
			out[i].Err = fmt.Errorf("fork sandbox %q: %w", id, f.Err)
			continue
		}
		sb, err := c.open(ctx, t, f.Info)
		if err != nil {
			// The caller never sees this sandbox: do not leave it running.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = t.KillSandbox(kctx, f.Info.SandboxID)
			cancel()
			out[i].Err = fmt.Errorf("fork sandbox %q: %w", id, err)
			continue
		}
		out[i].Sandbox = sb
	}
	return out, nil
}
