package userfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// FileMode is the permission of files created for a user, the usual 0644 of
// a 022 umask. A file that is overwritten keeps its permission instead.
const FileMode = 0o644

// tempPrefix starts the name of every file WriteFile is still writing. The
// name carries no part of the target's name, so it stays short whatever the
// target's length (NAME_MAX is 255 bytes).
const tempPrefix = ".tupper-upload-"

// copyBufferSize is the chunk WriteFile moves from the reader to the disk:
// large enough for few syscalls, small enough that concurrent uploads cost
// little memory.
const copyBufferSize = 1 << 20

// IsTempName reports whether a file's base name is that of a file WriteFile
// is still writing. Watchers use it to hide those files from clients, who
// see the finished file appear instead.
func IsTempName(name string) bool { return strings.HasPrefix(name, tempPrefix) }

// ReadError is a failure of the reader WriteFile copies from, as opposed to
// a failure of the disk: for an upload it means the request body was cut
// short or malformed.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "read upload: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// WriteFile writes everything r yields to path on behalf of u and returns the
// number of bytes written. It streams: memory use does not grow with the size
// of the data.
//
// The data goes to a temporary file in path's directory, which is synced and
// renamed over path only once r is exhausted, so a failed write (a reader
// error, a full disk) leaves no partial file and an existing file untouched.
// Every step that names a path runs as u (asuser.Do): missing parent
// directories are created by u, the file is created by u and so belongs to
// u, and a path u may not write fails with errdefs.ErrPermissionDenied. An
// existing file's permission bits are kept. When path is a symbolic link the
// file it points to is replaced, as writing through the link would, which
// takes the same permissions as writing that file directly.
//
// Errors carry errdefs classes: a directory at path is
// errdefs.ErrInvalidArgument, a full disk errdefs.ErrResourceExhausted, and a
// failure of r is a *ReadError.
func WriteFile(path string, r io.Reader, u *identity.User) (n int64, err error) {
	var tmp *os.File
	asked := path
	err = asuser.Do(u, func() (err error) {
		path, tmp, err = createFor(path)
		return err
	})
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		target := ""
		if path != "" && path != asked {
			target = ", a link to " + path
		}
		return 0, fmt.Errorf("user %q may not write %s%s: %w", u.Name, asked, target, err)
	}
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			asuser.Do(u, func() error { return os.Remove(tmp.Name()) })
		}
	}()
	// The data moves with root's credentials, on any thread: the file is
	// already open, and a descriptor's writes are not checked again.
	if n, err = copyTo(tmp, r); err != nil {
		return n, err
	}
	// Sync before rename: otherwise a crash could leave the new name
	// pointing at a file whose data never reached the disk. Sync and Close
	// are also where some filesystems report a full disk.
	if err := tmp.Sync(); err != nil {
		return n, fmt.Errorf("write %s: %w", path, Classify(err))
	}
	if err := tmp.Close(); err != nil {
		return n, fmt.Errorf("write %s: %w", path, Classify(err))
	}
	err = asuser.Do(u, func() error {
		if err := os.Rename(tmp.Name(), path); err != nil {
			return Classify(err)
		}
		committed = true
		syncDir(filepath.Dir(path))
		return nil
	})
	return n, err
}

// createFor resolves path's final links, creates its missing parents and a
// temporary file beside it with the mode the finished file is to have, all
// with the calling thread's credentials. It returns the resolved path (also
// with most errors, to name it) and the open temporary file.
func createFor(path string) (string, *os.File, error) {
	path, err := followLinks(path)
	if err != nil {
		return "", nil, err
	}
	mode := fs.FileMode(FileMode)
	switch st, err := os.Stat(path); {
	case err == nil && st.IsDir():
		return path, nil, fmt.Errorf("write %s: path is a directory: %w", path, errdefs.ErrInvalidArgument)
	case err == nil:
		mode = st.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return path, nil, Classify(err)
	}
	dir := filepath.Dir(path)
	if err := mkdirAll(dir); err != nil {
		return path, nil, err
	}
	tmp, err := createTemp(dir)
	if err != nil {
		return path, nil, Classify(err)
	}
	// The mode goes on before the data so the file is never visible under
	// path with the wrong permission, even for an instant.
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return path, nil, Classify(err)
	}
	return path, tmp, nil
}

// copyTo copies r to f with its own loop rather than io.Copy, so a failure
// can be told apart: reading r (the client's fault) or writing f (the disk's).
func copyTo(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, copyBufferSize)
	var n int64
	for {
		// Fill the buffer before writing: a network body arrives a few
		// KiB at a time, and each write is a system call, which costs
		// far more inside gVisor than the copy does.
		m, rerr := fill(r, buf)
		if m > 0 {
			if _, werr := f.Write(buf[:m]); werr != nil {
				return n, fmt.Errorf("write %s: %w", f.Name(), Classify(werr))
			}
			n += int64(m)
		}
		switch {
		case rerr == io.EOF:
			return n, nil
		case rerr != nil:
			return n, &ReadError{Err: rerr}
		}
	}
}

// fill reads into buf until it is full or r fails, returning r's error as
// is: unlike io.ReadFull it never turns an error into io.ErrUnexpectedEOF,
// which a truncated HTTP body itself reports.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func createTemp(dir string) (*os.File, error) {
	var b [8]byte
	for range 10 {
		rand.Read(b[:])
		name := filepath.Join(dir, tempPrefix+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("create temporary file in %s: too many collisions", dir)
}

// followLinks resolves symbolic links at the last element of path, so that
// WriteFile replaces a link's target rather than the link. A dangling link
// resolves to the path it names, which is then created.
func followLinks(path string) (string, error) {
	for range 40 { // Linux's own limit on links followed in one lookup.
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", Classify(err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = filepath.Clean(target)
	}
	return "", fmt.Errorf("write %s: too many levels of symbolic links: %w", path, errdefs.ErrInvalidArgument)
}

// syncDir makes a rename in dir durable. Failure only weakens crash safety
// (some filesystems cannot sync directories), so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
