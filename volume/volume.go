// Package volume keeps volumes on the host: persistent directories that
// sandboxes mount read-write, several at once, and that outlive them.
//
// A volume lives in a directory of its own (its Dir), laid out as
//
//	disk.img   a sparse file of the volume's size holding an ext4 file system
//	mnt/       where that file system is loop-mounted (nosuid, nodev)
//	mnt/data/  the volume's content: what sandboxes see at their mount path
//
// The file system of its own is the volume's size cap: a write past it
// fails with ENOSPC, in a sandbox and through the content routes alike,
// and nothing a sandbox does in it (links, special files, huge sparse
// files) reaches the host's own file systems. The content sits one level
// below the mount point so that an unmounted volume (after a host reboot,
// before the daemon mounts it again) has no data directory at all: a
// sandbox started then fails to mount it instead of writing, uncapped, to
// the host directory under the mount point.
//
// FS reads and writes a volume's content on a client's behalf. Its paths
// never lead outside the volume, whatever symbolic links a sandbox planted
// there (see FS).
package volume

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// Files of a volume's directory.
const (
	diskFile = "disk.img"
	mountDir = "mnt"
	dataDir  = "data"
)

// MinSize is the smallest volume: an ext4 file system with a journal
// needs a few MiB of its own before it holds anything.
const MinSize = 16 << 20

// DefaultUID and DefaultGID own what is made through FS without an owner
// named, and the volume's top directory: the "user" account of E2B's
// images, which commands run as unless they name another.
const (
	DefaultUID = 1000
	DefaultGID = 1000
)

// ErrFull is the class of a write that does not fit in its volume. It is
// an errdefs.ErrResourceExhausted.
var ErrFull = fmt.Errorf("the volume is full: %w", errdefs.ErrResourceExhausted)

// IsFull reports whether err is of class ErrFull.
func IsFull(err error) bool { return errors.Is(err, ErrFull) }

// DataDir is the directory of the volume in dir that sandboxes mount: it
// exists only while the volume is mounted (Mount).
func DataDir(dir string) string { return filepath.Join(dir, mountDir, dataDir) }

// FileType is the type of an entry of a volume.
type FileType string

// The types of entries, as E2B names them.
const (
	TypeFile      FileType = "file"
	TypeDirectory FileType = "directory"
	TypeSymlink   FileType = "symlink"
	TypeUnknown   FileType = "unknown"
)

// Entry describes a file, directory or link of a volume.
type Entry struct {
	// Name is the entry's last path element; Path its path from the
	// volume's top, which is "/".
	Name string
	Path string
	Type FileType
	Size int64
	// Mode holds the permission bits (with setuid, setgid and sticky).
	Mode uint32
	UID  uint32
	GID  uint32
	// Atime, Mtime and Ctime are the entry's times; zero where the host
	// does not tell.
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
	// Target is a symbolic link's target, as written.
	Target string
}

// Usage is how much of a volume is taken.
type Usage struct {
	// Size is what the volume's file system holds in all; Used what is
	// taken of it and Free what a write may still take.
	Size, Used, Free int64
}
