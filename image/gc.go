package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// staleIndexTemp is the age after which a temporary index file is taken to
// be abandoned: an index update takes milliseconds.
const staleIndexTemp = 10 * time.Minute

// collect deletes the blobs and root filesystems that no image in the index
// needs, and everything in tmp/ and locks/. It needs gc.lock exclusively, so it
// never runs while an operation is adding to the store (such operations hold
// the lock shared from their first write to their index update). With wait
// false it returns at once, reporting false, if the lock is taken; the last
// writer to finish collects instead.
func (s *Store) collect(ctx context.Context, wait bool) (ran bool, err error) {
	var l *fileLock
	if wait {
		l, err = lockFile(ctx, s.path("gc.lock"), true)
	} else {
		var ok bool
		l, ok, err = tryLockFile(s.path("gc.lock"), true)
		if err == nil && !ok {
			s.log.Debug("garbage collection deferred: another operation is writing", "op", "gc")
			return false, nil
		}
	}
	if err != nil {
		return false, err
	}
	defer l.release()

	// A Remove may shrink the index while we work; that only makes more
	// garbage, which the next collection takes.
	idx, err := s.readIndex()
	if err != nil {
		return true, err
	}
	keepBlobs := map[string]bool{}
	keepRoots := map[string]bool{}
	leased, err := s.leases()
	if err != nil {
		return true, err
	}
	keep := make([]*record, 0, len(idx.Images)+len(leased))
	for _, r := range idx.Images {
		keep = append(keep, r)
	}
	for _, r := range leased {
		keep = append(keep, r)
	}
	for _, r := range keep {
		keepBlobs[strings.TrimPrefix(r.ID, idPrefix)] = true
		keepBlobs[strings.TrimPrefix(r.Manifest, idPrefix)] = true
		for _, layer := range r.Layers {
			keepBlobs[strings.TrimPrefix(layer.Digest, idPrefix)] = true
		}
		keepRoots[strings.TrimPrefix(r.ChainID, idPrefix)] = true
	}

	var blobs, roots, leftovers int
	var errs []error
	// Leftovers first: nothing is writing, so whatever is in tmp/ is from an
	// operation that crashed or was killed, and no lock file is held.
	for _, dir := range []string{"tmp", "locks"} {
		entries, err := os.ReadDir(s.path(dir))
		if err != nil {
			return true, fmt.Errorf("garbage collection: %w", err)
		}
		for _, e := range entries {
			if err := removeTree(s.path(dir, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			if dir == "tmp" {
				leftovers++
			}
		}
	}

	// Temporary files of index updates killed before their rename. Index
	// updates do not take gc.lock, so only old ones are surely abandoned.
	if matches, err := filepath.Glob(s.path(".index.json.tmp-*")); err == nil {
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && time.Since(st.ModTime()) > staleIndexTemp {
				if os.Remove(m) == nil {
					leftovers++
				}
			}
		}
	}

	blobDir := s.path("blobs", "sha256")
	entries, err := os.ReadDir(blobDir)
	if err != nil {
		return true, fmt.Errorf("garbage collection: %w", err)
	}
	for _, e := range entries {
		if keepBlobs[e.Name()] {
			continue
		}
		if err := os.Remove(filepath.Join(blobDir, e.Name())); err != nil && !isNotExist(err) {
			errs = append(errs, err)
			continue
		}
		blobs++
	}

	entries, err = os.ReadDir(s.path("unpacked"))
	if err != nil {
		return true, fmt.Errorf("garbage collection: %w", err)
	}
	for _, e := range entries {
		if keepRoots[e.Name()] {
			continue
		}
		// Move it out first: a crash while deleting must not leave a partial
		// tree under a name that means "complete".
		doomed := s.path("tmp", "gc-"+e.Name())
		if err := os.Rename(s.path("unpacked", e.Name()), doomed); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := removeTree(doomed); err != nil {
			errs = append(errs, err)
			continue
		}
		roots++
	}

	if blobs+roots+leftovers > 0 {
		s.log.Info("garbage collected", "op", "gc", "blobs", blobs, "rootfs", roots, "leftovers", leftovers)
	}
	if len(errs) > 0 {
		return true, fmt.Errorf("garbage collection: %d deletions failed, first: %w", len(errs), errs[0])
	}
	return true, nil
}
