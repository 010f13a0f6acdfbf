package firecracker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// uidLeases hands out the uids the jailed VMMs run as, one per sandbox, so
// that a VMM that broke out of its guest still cannot touch another
// sandbox's files or processes. A lease is the file <dir>/<n>, holding the
// sandbox id, for uid base+n; creating it with O_EXCL is the claim.
type uidLeases struct {
	dir         string
	base, count int
}

// claim leases a uid to sandbox id. It fails with
// errdefs.ErrResourceExhausted when every uid of the range is leased.
func (l uidLeases) claim(id string) (int, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return 0, fmt.Errorf("uid leases: %w", err)
	}
	used := make(map[int]bool, len(entries))
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			used[n] = true
		}
	}
	for n := range l.count {
		if used[n] {
			continue
		}
		f, err := os.OpenFile(filepath.Join(l.dir, strconv.Itoa(n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // claimed since the listing
		}
		if err != nil {
			return 0, fmt.Errorf("uid leases: %w", err)
		}
		_, werr := f.WriteString(id)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(f.Name())
			return 0, fmt.Errorf("uid leases: %w", werr)
		}
		return l.base + n, nil
	}
	return 0, fmt.Errorf("all %d uids from %d are leased to sandboxes: %w", l.count, l.base, errdefs.ErrResourceExhausted)
}

// release removes every lease held by sandbox id.
func (l uidLeases) release(id string) error {
	held, err := l.holders()
	if err != nil {
		return err
	}
	var errs []error
	for name, holder := range held {
		if holder == id {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// holders maps each lease file's name to the sandbox that holds it.
func (l uidLeases) holders() (map[string]string, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("uid leases: %w", err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(l.dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("uid leases: %w", err)
		}
		out[e.Name()] = strings.TrimSpace(string(b))
	}
	return out, nil
}
