package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/atomicfile"
)

// A lease keeps an image's data (its blobs and unpacked root filesystem)
// while something uses it, as containerd's leases root its garbage
// collector: `tupper image rm` of an image a sandbox runs on removes the
// name at once, and the data goes with the last lease. Leases are files
// under <root>/leases/, one per holder, so that every process that opens
// the store (the daemon, a CLI) sees them.

var holderPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Lease pins the image id (as Image.ID) for holder (a sandbox id, say),
// replacing what holder pinned before. It fails with errdefs.ErrNotFound
// when the store has no such image, or when its root filesystem is gone:
// a lease taken too late protects nothing.
func (s *Store) Lease(ctx context.Context, holder, id string) error {
	if !holderPattern.MatchString(holder) {
		return fmt.Errorf("image lease: holder %q: %w", holder, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	r := idx.Images[id]
	if r == nil {
		return fmt.Errorf("image lease for %s: image %s: %w", holder, shortID(id), errdefs.ErrNotFound)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.path("leases", holder), b, 0o600); err != nil {
		return fmt.Errorf("image lease for %s: %w", holder, err)
	}
	// The collector may have run between the index read and the write.
	if !s.stillHeld(r) {
		s.Release(context.WithoutCancel(ctx), holder)
		return fmt.Errorf("image lease for %s: image %s was removed meanwhile: %w", holder, shortID(id), errdefs.ErrNotFound)
	}
	return nil
}

// Release drops holder's lease, if any, and collects what no image and no
// other lease needs any more.
func (s *Store) Release(ctx context.Context, holder string) error {
	if !holderPattern.MatchString(holder) {
		return fmt.Errorf("image lease: holder %q: %w", holder, errdefs.ErrInvalidArgument)
	}
	if err := os.Remove(s.path("leases", holder)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("image lease of %s: %w", holder, err)
	}
	if _, err := s.collect(ctx, false); err != nil {
		s.log.Warn("garbage collection failed", "op", "release", "err", err)
	}
	return nil
}

// Holders returns the holders of leases, sorted; with id set, only those
// that pin that image.
func (s *Store) Holders(ctx context.Context, id string) ([]string, error) {
	leases, err := s.leases()
	if err != nil {
		return nil, err
	}
	var out []string
	for h, r := range leases {
		if id == "" || r.ID == id {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out, nil
}

// leases reads every lease file, by holder. A file that does not parse is
// skipped: it pins nothing, which at worst lets data go early, never
// keeps it for ever.
func (s *Store) leases() (map[string]*record, error) {
	entries, err := os.ReadDir(s.path("leases"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image leases: %w", err)
	}
	out := map[string]*record{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // an atomic write's temporary file
		}
		b, err := os.ReadFile(s.path("leases", e.Name()))
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(b, &r) != nil || r.ID == "" {
			s.log.Warn("unreadable image lease skipped", "holder", e.Name())
			continue
		}
		out[e.Name()] = &r
	}
	return out, nil
}

// stillHeld reports whether the data of r is still in the store: its root
// filesystem, or in a blobs-only store its layers.
func (s *Store) stillHeld(r *record) bool {
	if !s.blobsOnly {
		_, err := os.Lstat(s.rootfsPath(r.ChainID))
		return err == nil
	}
	for _, l := range r.Layers {
		d, err := v1.NewHash(l.Digest)
		if err != nil || !s.hasBlob(d) {
			return false
		}
	}
	return true
}
