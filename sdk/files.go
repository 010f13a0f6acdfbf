package sdk

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/lightbearco/tupper/proto/filesystem"
)

// Files reads, writes, lists and watches files in a sandbox. Get it as
// Sandbox.Files. Paths are absolute or relative to the acting user's home
// directory. It is safe for concurrent use.
type Files struct {
	c *conn
}

// FileType is the type of a filesystem entry.
type FileType string

// The types of entries, spelled as in the E2B SDKs.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeUnknown FileType = ""
)

// EntryInfo describes a file, directory or symbolic link.
type EntryInfo struct {
	Name string
	Type FileType
	// Path is the entry's absolute path in the sandbox.
	Path string
	Size int64
	// Mode holds the permission bits and, from Type, the type bits, as
	// Go's io/fs spells them (so Mode.IsDir and Mode.IsRegular work).
	Mode fs.FileMode
	// Permissions is the permission string, like "-rw-r--r--".
	Permissions  string
	Owner, Group string
	ModifiedTime time.Time
	// SymlinkTarget is where a symbolic link points; empty otherwise.
	SymlinkTarget string
	Metadata      map[string]string
}

// WriteInfo describes a file that was written.
type WriteInfo struct {
	Name string   `json:"name"`
	Type FileType `json:"type"`
	Path string   `json:"path"`
}

// List lists the directory path, descending depth levels (depth < 1 means
// 1: the directory's own entries).
func (f *Files) List(ctx context.Context, path string, depth int, opts ...FileOption) ([]EntryInfo, error) {
	o := newFileOptions(opts)
	resp, err := f.c.fs.ListDir(ctx, newRequest(&filesystem.ListDirRequest{Path: path, Depth: uint32(max(depth, 1))}, o.user))
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", path, fromConnect(err))
	}
	out := make([]EntryInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, entryInfo(e))
	}
	return out, nil
}

// Stat describes path. A missing path is an error of class
// errdefs.ErrNotFound.
func (f *Files) Stat(ctx context.Context, path string, opts ...FileOption) (*EntryInfo, error) {
	o := newFileOptions(opts)
	resp, err := f.c.fs.Stat(ctx, newRequest(&filesystem.StatRequest{Path: path}, o.user))
	if err != nil {
		return nil, fmt.Errorf("stat %q: %w", path, fromConnect(err))
	}
	e := entryInfo(resp.Msg.GetEntry())
	return &e, nil
}

// GetInfo is Stat, under the name the E2B SDKs use.
func (f *Files) GetInfo(ctx context.Context, path string, opts ...FileOption) (*EntryInfo, error) {
	return f.Stat(ctx, path, opts...)
}

// Exists reports whether path exists.
func (f *Files) Exists(ctx context.Context, path string, opts ...FileOption) (bool, error) {
	_, err := f.Stat(ctx, path, opts...)
	switch {
	case err == nil:
		return true, nil
	case IsNotFound(err):
		return false, nil
	}
	return false, err
}

// MakeDir creates the directory path and its missing parents. It reports
// whether it created path: false, with no error, when path existed already.
func (f *Files) MakeDir(ctx context.Context, path string, opts ...FileOption) (bool, error) {
	o := newFileOptions(opts)
	_, err := f.c.fs.MakeDir(ctx, newRequest(&filesystem.MakeDirRequest{Path: path}, o.user))
	if err != nil {
		err = fromConnect(err)
		if IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("make directory %q: %w", path, err)
	}
	return true, nil
}

// Remove removes path, recursively for a directory.
func (f *Files) Remove(ctx context.Context, path string, opts ...FileOption) error {
	o := newFileOptions(opts)
	if _, err := f.c.fs.Remove(ctx, newRequest(&filesystem.RemoveRequest{Path: path}, o.user)); err != nil {
		return fmt.Errorf("remove %q: %w", path, fromConnect(err))
	}
	return nil
}

// Rename moves oldPath to newPath and describes the entry at its new place.
func (f *Files) Rename(ctx context.Context, oldPath, newPath string, opts ...FileOption) (*EntryInfo, error) {
	o := newFileOptions(opts)
	resp, err := f.c.fs.Move(ctx, newRequest(&filesystem.MoveRequest{Source: oldPath, Destination: newPath}, o.user))
	if err != nil {
		return nil, fmt.Errorf("rename %q to %q: %w", oldPath, newPath, fromConnect(err))
	}
	e := entryInfo(resp.Msg.GetEntry())
	return &e, nil
}

func fileType(t filesystem.FileType) FileType {
	switch t {
	case filesystem.FileType_FILE_TYPE_FILE:
		return FileTypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		return FileTypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		return FileTypeSymlink
	}
	return FileTypeUnknown
}

// fileMode makes a Go file mode of the wire's mode, which carries the
// permission bits (envd sends no type bits), and the entry's type.
func fileMode(mode uint32, t filesystem.FileType) fs.FileMode {
	m := fs.FileMode(mode)
	switch t {
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		m |= fs.ModeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		m |= fs.ModeSymlink
	}
	return m
}

func entryInfo(e *filesystem.EntryInfo) EntryInfo {
	if e == nil {
		return EntryInfo{}
	}
	var mtime time.Time
	if e.GetModifiedTime() != nil {
		mtime = e.GetModifiedTime().AsTime()
	}
	return EntryInfo{
		Name:          e.GetName(),
		Type:          fileType(e.GetType()),
		Path:          e.GetPath(),
		Size:          e.GetSize(),
		Mode:          fileMode(e.GetMode(), e.GetType()),
		Permissions:   e.GetPermissions(),
		Owner:         e.GetOwner(),
		Group:         e.GetGroup(),
		ModifiedTime:  mtime,
		SymlinkTarget: e.GetSymlinkTarget(),
		Metadata:      e.GetMetadata(),
	}
}
