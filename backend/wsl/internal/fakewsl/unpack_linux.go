package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// unpack writes the tar read from r under root as WSL's import does with
// bsdtar: owners, modes (set-id bits included), links, device nodes and
// extended attributes kept; later entries replace earlier ones of the same
// name. No entry may leave root, by its name or through a symbolic link
// an earlier entry made.
func unpack(r io.Reader, root string) error {
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := unpackEntry(root, hdr, tr); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

func unpackEntry(root string, hdr *tar.Header, r io.Reader) error {
	name, err := relName(hdr.Name)
	if err != nil {
		return err
	}
	target := root
	if name != "" {
		parent, err := safeDir(root, path.Dir(name))
		if err != nil {
			return err
		}
		target = filepath.Join(parent, path.Base(name))
	}
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
			os.Remove(target)
		}
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		os.Remove(target)
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		os.Remove(target)
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return err
		}
		return unix.Lchown(target, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		src, err := relName(hdr.Linkname)
		if err != nil {
			return err
		}
		srcDir, err := safeDir(root, path.Dir(src))
		if err != nil {
			return err
		}
		os.Remove(target)
		return os.Link(filepath.Join(srcDir, path.Base(src)), target)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		os.Remove(target)
		if err := unix.Mknod(target, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return err
		}
	default:
		return nil
	}
	// Owner before mode: chown clears the set-id bits.
	if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := unix.Chmod(target, mode); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		if attr, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			unix.Lsetxattr(target, attr, []byte(v), 0)
		}
	}
	return os.Chtimes(target, hdr.ModTime, hdr.ModTime)
}

// relName makes a tar name relative and clean ("" for the root), refusing
// one with "..".
func relName(name string) (string, error) {
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("name %q leaves the root", name)
		}
	}
	return strings.TrimPrefix(path.Clean("/"+name), "/"), nil
}

// safeDir returns the host path of directory rel under root, making the
// directories that are missing, and refuses a path through a symbolic
// link.
func safeDir(root, rel string) (string, error) {
	dir := root
	if rel == "." || rel == "/" || rel == "" {
		return dir, nil
	}
	for _, part := range strings.Split(rel, "/") {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o755); err != nil {
				return "", err
			}
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			return "", fmt.Errorf("%s is a symbolic link", dir)
		case !fi.IsDir():
			return "", fmt.Errorf("%s is not a directory", dir)
		}
	}
	return dir, nil
}
