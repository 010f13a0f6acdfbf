package userfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lightbearco/tupper/agent/asuser"
	"github.com/lightbearco/tupper/agent/identity"
	"github.com/lightbearco/tupper/errdefs"
)

// DirMode is the permission of directories created for a user, the usual
// 0755 of mkdir under a 022 umask.
const DirMode = 0o755

// MkdirAll creates dir and any missing parents, like mkdir -p, as u: the
// directories it creates belong to u, and a parent u may not write to fails
// with errdefs.ErrPermissionDenied. Directories that already exist keep their
// owner. A non-directory in the way fails with errdefs.ErrInvalidArgument.
func MkdirAll(dir string, u *identity.User) error {
	return asuser.Do(u, func() error { return mkdirAll(dir) })
}

// mkdirAll is MkdirAll with the calling thread's credentials.
func mkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	// Find the missing tail of the path first, so that a failure names the
	// directory that could not be made.
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("mkdir %s: %s is not a directory: %w", dir, p, errdefs.ErrInvalidArgument)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return Classify(err)
		}
		missing = append(missing, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, DirMode); err != nil {
			// Another request may have created it meanwhile; that is fine
			// as long as it is a directory.
			if st, serr := os.Stat(p); errors.Is(err, fs.ErrExist) && serr == nil && st.IsDir() {
				continue
			}
			return Classify(err)
		}
	}
	return nil
}
