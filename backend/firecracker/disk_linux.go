package firecracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lightbearco/tupper/backend"
)

// diskRecipe changes whenever the way image disks are made changes, so
// that disks cached the old way are not used.
const diskRecipe = "1"

// The guest's disks' labels, by which its init finds them
// (cmd/tupper-agent, vminit_linux.go).
const (
	baseLabel = "tupper-base"
	rwLabel   = "tupper-rw"
	// bootConfigName is the boot configuration's file on the writable
	// disk.
	bootConfigName = "tupper-boot.json"
)

// bootConfig is what the guest's init reads from the writable disk; the
// agent's vmBootConfiguration, with the same JSON.
type bootConfig struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env"`
	Args     []string `json:"args"`
	Pids     int64    `json:"pids,omitempty"`
}

// imageKey names spec's image disk in the cache: the image's ChainID when
// the image store gave one (equal stacks of layers unpack to equal roots),
// else the root directory's path and modification time, which is what a
// test's directory offers.
func imageKey(spec *backend.Spec) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\n", diskRecipe)
	if spec.Image != nil && spec.Image.ChainID != "" {
		fmt.Fprintf(h, "chain %s\n", spec.Image.ChainID)
	} else {
		fi, err := os.Stat(spec.RootFS)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "root %s %d\n", spec.RootFS, fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// treeSize estimates what the files under root take on ext4 with 4 KiB
// blocks, and counts its inodes.
func treeSize(root string) (bytes int64, inodes int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		// A block per directory, symlink or special file; regular files
		// their blocks, rounded up, and a block of extent tree for the
		// large ones.
		n := (fi.Size() + 4095) &^ 4095
		if !fi.Mode().IsRegular() || n == 0 {
			n = 4096
		}
		if fi.Size() > 128<<20 {
			n += 4096
		}
		bytes += n
		return nil
	})
	return bytes, inodes, err
}

// makeBaseDisk writes an ext4 file system holding the tree at root to
// path: owners, modes, set-id bits, symlinks, hard links, device nodes and
// extended attributes as they are (mkfs.ext4 -d copies them; it must run
// as root to keep owners). It has no journal: the guest mounts it
// read-only. A size estimate that turns out short is doubled, twice.
func makeBaseDisk(ctx context.Context, mkfs, root, path string) error {
	size, inodes, err := treeSize(root)
	if err != nil {
		return fmt.Errorf("image disk: %w", err)
	}
	size += size/5 + 16<<20
	inodes += inodes/4 + 1024
	var lastErr error
	for range 3 {
		os.Remove(path)
		err := runMkfs(ctx, mkfs, path, size,
			"-L", baseLabel, "-m", "0", "-N", strconv.FormatInt(inodes, 10),
			"-O", "^has_journal", "-E", "nodiscard", "-d", root)
		if err == nil {
			return nil
		}
		lastErr = err
		if !errors.Is(err, errNoSpace) {
			break
		}
		size *= 2
		inodes *= 2
	}
	os.Remove(path)
	return fmt.Errorf("image disk: %w", lastErr)
}

// errNoSpace marks a mkfs that ran out of blocks or inodes.
var errNoSpace = errors.New("the file system was too small")

// makeRWDisk writes the sandbox's writable disk to path: a sparse ext4
// file system of size bytes holding upper/ and work/ for the guest's
// overlay and the boot configuration. staging is a directory that does
// not exist yet, where the content is put together; it is removed.
func makeRWDisk(ctx context.Context, mkfs, path, staging string, size int64, boot *bootConfig) error {
	b, err := json.Marshal(boot)
	if err != nil {
		return err
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return fmt.Errorf("writable disk: %w", err)
	}
	defer os.RemoveAll(staging)
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(staging, d), 0o755); err != nil {
			return fmt.Errorf("writable disk: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, bootConfigName), b, 0o600); err != nil {
		return fmt.Errorf("writable disk: %w", err)
	}
	// The guest zeroes the inode tables and the journal lazily as it
	// needs them: the file stays sparse and mkfs quick.
	if err := runMkfs(ctx, mkfs, path, size,
		"-L", rwLabel, "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-d", staging); err != nil {
		os.Remove(path)
		return fmt.Errorf("writable disk: %w", err)
	}
	return nil
}

// runMkfs makes an ext4 file system of size bytes, rounded up to whole
// MiBs, in the file at path, which it creates sparse.
func runMkfs(ctx context.Context, mkfs, path string, size int64, args ...string) error {
	// Whole MiBs: a block device's size is whole sectors, and the file
	// system's whole blocks.
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return err
	}
	// -F: the target is a file; -q: only errors; -b 4096 as treeSize
	// counts; -T default: no "small" profile with 1 KiB blocks.
	argv := append([]string{"-q", "-F", "-t", "ext4", "-b", "4096", "-T", "default"}, args...)
	argv = append(argv, path)
	out, err := exec.CommandContext(ctx, mkfs, argv...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "Could not allocate block") || strings.Contains(msg, "No space left") || strings.Contains(msg, "inode") && strings.Contains(msg, "alloc") {
			return fmt.Errorf("%s: %w: %s", filepath.Base(mkfs), errNoSpace, msg)
		}
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(mkfs), strings.Join(argv, " "), err, msg)
	}
	return nil
}

// lockFile takes an exclusive lock of the file at path, made if missing,
// and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
