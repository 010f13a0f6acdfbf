package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/atomicfile"
)

// blobPath is where the blob with digest d lives. Only sha256 digests reach
// it: checkDigest guards every way in.
func (s *Store) blobPath(d v1.Hash) string { return s.path("blobs", "sha256", d.Hex) }

func (s *Store) hasBlob(d v1.Hash) bool { return exists(s.blobPath(d)) }

// checkDigest rejects digests the store cannot name a blob by.
func checkDigest(d v1.Hash) error {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 || !isHex(d.Hex) {
		return fmt.Errorf("digest %q: only sha256 digests are supported: %w", d, errdefs.ErrNotSupported)
	}
	return nil
}

// blobSource is a blob to store: its expected digest and size (-1 when not
// known) and a way to read it.
type blobSource struct {
	Digest v1.Hash
	Size   int64
	Open   func() (io.ReadCloser, error)
}

// putBlob stores a blob unless the store has it already, and reports whether
// it had to copy it. The content is checked against the digest before it
// appears in the store. Concurrent calls for one digest copy it once: the
// others wait and find it there.
func (s *Store) putBlob(ctx context.Context, src blobSource, rep *reporter, phase Phase) (copied bool, err error) {
	if err := checkDigest(src.Digest); err != nil {
		return false, err
	}
	if s.hasBlob(src.Digest) {
		return false, nil
	}
	l, err := lockFile(ctx, s.path("locks", "blob-"+src.Digest.Hex), true)
	if err != nil {
		return false, err
	}
	defer l.release()
	if s.hasBlob(src.Digest) {
		return false, nil
	}

	rc, err := src.Open()
	if err != nil {
		return false, err
	}
	defer rc.Close()
	total := max(src.Size, 0)
	cr := &countingReader{r: ctxReader{ctx, rc}, rep: rep, phase: phase, item: src.Digest.String(), total: total}
	rep.event(Event{Phase: phase, Item: src.Digest.String(), Total: total})
	f, err := os.CreateTemp(s.path("tmp"), "blob-")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name()) // no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), cr)
	if err != nil {
		f.Close()
		return false, fmt.Errorf("copy blob %s: %w", src.Digest, err)
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if got != src.Digest {
		f.Close()
		return false, fmt.Errorf("blob %s: content has digest %s: it was corrupted on the way or the source is broken; retry: %w",
			src.Digest, got, errdefs.ErrFailedPrecondition)
	}
	if src.Size >= 0 && n != src.Size {
		f.Close()
		return false, fmt.Errorf("blob %s: got %d bytes, want %d: retry: %w", src.Digest, n, src.Size, errdefs.ErrFailedPrecondition)
	}
	if err := s.commitBlobFile(f, src.Digest); err != nil {
		return false, err
	}
	cr.done()
	return true, nil
}

// putBlobBytes stores a small blob held in memory and returns its digest.
func (s *Store) putBlobBytes(ctx context.Context, data []byte) (v1.Hash, error) {
	d := sha256Hash(data)
	_, err := s.putBlob(ctx, blobSource{Digest: d, Size: int64(len(data)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}, nil, PhaseDownload)
	return d, err
}

// adoptBlob moves a file that is already inside the store's tmp/ into the blob
// store under its digest, without copying it, and returns the digest and size.
func (s *Store) adoptBlob(ctx context.Context, path string, rep *reporter, item string) (v1.Hash, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return v1.Hash{}, 0, err
	}
	h := sha256.New()
	cr := &countingReader{r: ctxReader{ctx, f}, rep: rep, phase: PhaseRead, item: item, total: st.Size()}
	if _, err := io.Copy(h, cr); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("hash %s: %w", path, err)
	}
	cr.done()
	d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if s.hasBlob(d) {
		return d, st.Size(), nil
	}
	l, err := lockFile(ctx, s.path("locks", "blob-"+d.Hex), true)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer l.release()
	if s.hasBlob(d) {
		return d, st.Size(), nil
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	if err := s.commitBlobFile(w, d); err != nil {
		return v1.Hash{}, 0, err
	}
	return d, st.Size(), nil
}

// commitBlobFile makes f read-only, syncs it, closes it and renames it into
// place as blob d.
func (s *Store) commitBlobFile(f *os.File, d v1.Hash) error {
	err := f.Chmod(0o444)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), s.blobPath(d))
	}
	if err == nil {
		err = atomicfile.SyncDir(s.path("blobs", "sha256"))
	}
	if err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	return nil
}

// openBlob opens a stored blob.
func (s *Store) openBlob(d v1.Hash) (*os.File, error) {
	if err := checkDigest(d); err != nil {
		return nil, err
	}
	f, err := os.Open(s.blobPath(d))
	if err != nil {
		return nil, fmt.Errorf("blob %s is missing from the store (%v): pull or import the image again: %w", d, err, errdefs.ErrNotFound)
	}
	return f, nil
}

func sha256Hash(data []byte) v1.Hash {
	sum := sha256.Sum256(data)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// hashWriter returns a new sha256 and a function rendering its digest.
func hashWriter() (hash.Hash, func() v1.Hash) {
	h := sha256.New()
	return h, func() v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))} }
}

// ctxReader fails reads once ctx is done, so long copies stop promptly.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
