package firecracker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// snapshotFormat is the version of a checkpoint directory's layout and
// manifest. Restore refuses a checkpoint of another.
const snapshotFormat = 1

// Files of a checkpoint directory.
const (
	manifestName  = "manifest.json"
	snapStateName = "vmstate" // Firecracker's microVM state file
	snapMemName   = "memory"  // the guest's memory, whole
	// The writable disk is rwDiskName, a copy of the sandbox's.
)

// Files in the VMM's root: the snapshot it writes (moved into the
// checkpoint directory once written) and the one it was restored from. The
// names differ, so that a restored sandbox's checkpoint never overwrites
// the memory file its guest runs on.
const (
	ckptStateName    = "checkpoint.vmstate"
	ckptMemName      = "checkpoint.mem"
	restoreStateName = "restore.vmstate"
	restoreMemName   = "restore.mem"
)

// manifest says what a checkpoint directory holds and what it may be
// restored into.
type manifest struct {
	Format  int    `json:"format"`
	Backend string `json:"backend"`
	// ID is the sandbox the checkpoint was made of.
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
	// VMMVersion is Firecracker's version: the microVM state file is in
	// its format.
	VMMVersion string `json:"vmmVersion"`
	// AgentSum is the SHA-256 of the agent in the guest's memory.
	AgentSum string `json:"agentSha256"`
	// ImageKey names the image disk (see imageKey), ChainID the image it
	// was made from, when the image store gave one.
	ImageKey string `json:"imageKey"`
	ChainID  string `json:"chainID,omitempty"`
	// Jailed tells the layout of the VMM's root the snapshot's paths
	// name: the jailer's chroot, or the sandbox's directory.
	Jailed bool `json:"jailed"`
	// The microVM's size, fixed in the snapshot, and the VMM's cpu
	// quota.
	VCPUs     int     `json:"vcpus"`
	MemoryMiB int64   `json:"memoryMiB"`
	CPUs      float64 `json:"cpus"`
	DiskBytes int64   `json:"diskBytes"`
	// Files are the checkpoint's files with their sizes.
	Files []manifestFile `json:"files"`
}

type manifestFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// snapshotFiles are the files every checkpoint holds besides its manifest.
var snapshotFiles = []string{snapStateName, snapMemName, rwDiskName}

// readManifest reads dir's manifest. It fails with errdefs.ErrNotFound
// when dir holds none (no checkpoint, or one whose making failed).
func readManifest(dir string) (*manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: no %s: %w", dir, manifestName, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s: %w: %w", dir, manifestName, errdefs.ErrInvalidArgument, err)
	}
	return &m, nil
}

// restoreTarget is what a Restore offers a checkpoint: the layout of its
// VMM's root, the spec's image disk and the spec's agent.
type restoreTarget struct {
	Jailed   bool
	ImageKey string
	// AgentSum is empty when the spec names no agent.
	AgentSum string
}

// check refuses a checkpoint that cannot be restored into t, with
// errdefs.ErrFailedPrecondition: another format or backend, another layout
// of the VMM's root, another image, another agent, or files missing or cut
// short. Firecracker's version is checked once the VMM runs.
func (m *manifest) check(dir string, t restoreTarget) error {
	var errs []error
	if m.Format != snapshotFormat || m.Backend != "firecracker" {
		errs = append(errs, fmt.Errorf("it is a %q checkpoint of format %d; this backend reads firecracker format %d", m.Backend, m.Format, snapshotFormat))
	}
	if m.Jailed != t.Jailed {
		errs = append(errs, fmt.Errorf("it was made %s, and its paths name that layout; this backend runs Firecracker %s", jailWord(m.Jailed), jailWord(t.Jailed)))
	}
	if m.ImageKey != t.ImageKey {
		errs = append(errs, fmt.Errorf("it was made for image %s (disk %s), not the spec's (disk %s)", orUnknown(m.ChainID), m.ImageKey, t.ImageKey))
	}
	if t.AgentSum != "" && m.AgentSum != t.AgentSum {
		errs = append(errs, fmt.Errorf("its guest runs agent sha256:%s, not the spec's sha256:%s", m.AgentSum, t.AgentSum))
	}
	have := map[string]int64{}
	for _, f := range m.Files {
		have[f.Name] = f.Size
	}
	for _, name := range snapshotFiles {
		size, ok := have[name]
		if !ok {
			errs = append(errs, fmt.Errorf("its manifest lists no %s", name))
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		switch {
		case err != nil:
			errs = append(errs, err)
		case fi.Size() != size:
			errs = append(errs, fmt.Errorf("%s is %d bytes, the manifest says %d", name, fi.Size(), size))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint %s: %w: %w", dir, errdefs.ErrFailedPrecondition, err)
	}
	return nil
}

func jailWord(jailed bool) string {
	if jailed {
		return "under the jailer"
	}
	return "without the jailer"
}

func orUnknown(s string) string {
	if s == "" {
		return "(a directory)"
	}
	return s
}
