package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"

	"github.com/lightbearco/tupper/errdefs"
	"github.com/lightbearco/tupper/internal/atomicfile"
)

// ensureUnpackedUnlessBlobsOnly is ensureUnpacked, except in a blobs-only
// store, where nothing is unpacked and the image's size is its layers'.
func (s *Store) ensureUnpackedUnlessBlobsOnly(ctx context.Context, chainID v1.Hash, layers []layerRecord, rep *reporter) (int64, error) {
	if !s.blobsOnly {
		return s.ensureUnpacked(ctx, chainID, layers, rep)
	}
	var size int64
	for _, l := range layers {
		size += l.Size
	}
	rep.message(PhaseUnpack, chainID.String(), "kept as layers: this store does not unpack")
	return size, nil
}

// ensureUnpacked makes sure the root filesystem for chainID exists, unpacking
// layers (bottom first) into it if not, and returns its size. Concurrent calls
// for one chain id unpack once: the others wait and find it done.
//
// The tree is built in tmp/ and renamed into unpacked/ only when complete and
// flushed to disk, so a crash never leaves a partial tree that looks whole.
func (s *Store) ensureUnpacked(ctx context.Context, chainID v1.Hash, layers []layerRecord, rep *reporter) (int64, error) {
	if size, ok := s.unpackedSize(chainID); ok {
		rep.message(PhaseUnpack, chainID.String(), "already unpacked")
		return size, nil
	}
	l, err := lockFile(ctx, s.path("locks", "unpack-"+chainID.Hex), true)
	if err != nil {
		return 0, err
	}
	defer l.release()
	if size, ok := s.unpackedSize(chainID); ok {
		rep.message(PhaseUnpack, chainID.String(), "already unpacked")
		return size, nil
	}

	start := time.Now()
	tmp, err := os.MkdirTemp(s.path("tmp"), "unpack-")
	if err != nil {
		return 0, fmt.Errorf("unpack: %w", err)
	}
	done := false
	defer func() {
		if !done {
			if err := removeTree(tmp); err != nil {
				s.log.Warn("cannot clean up a failed unpack", "op", "unpack", "dir", tmp, "err", err)
			}
		}
	}()
	rootfs := filepath.Join(tmp, "rootfs")
	// An image made by Commit stacks on one whose tree is unpacked
	// already: start from a copy of it.
	done0, err := s.cloneUnpacked(ctx, layers, rootfs)
	if err != nil {
		return 0, fmt.Errorf("unpack: %w", err)
	}
	if done0 == 0 {
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return 0, fmt.Errorf("unpack: %w", err)
		}
		if err := os.Chmod(rootfs, 0o755); err != nil { // undo the umask
			return 0, fmt.Errorf("unpack: %w", err)
		}
	}
	for _, layer := range layers[done0:] {
		rep.event(Event{Phase: PhaseUnpack, Item: layer.Digest, Total: max(layer.Size, 0)})
	}
	for _, layer := range layers[done0:] {
		if err := s.applyBlob(ctx, rootfs, layer, rep); err != nil {
			return 0, err
		}
	}
	size, err := treeSize(rootfs)
	if err != nil {
		return 0, fmt.Errorf("unpack: measure root filesystem: %w", err)
	}
	meta, err := json.Marshal(unpackedMeta{ChainID: chainID.String(), Size: size, Unpacked: time.Now().UTC()})
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600); err != nil {
		return 0, fmt.Errorf("unpack: %w", err)
	}
	// One syncfs flushes the whole tree, far cheaper than an fsync per file.
	if err := syncFS(tmp); err != nil {
		return 0, fmt.Errorf("unpack: flush to disk: %w", err)
	}
	dst := s.unpackedDir(chainID.String())
	if err := os.Rename(tmp, dst); err != nil {
		return 0, fmt.Errorf("unpack: move root filesystem into place: %w", err)
	}
	done = true
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return 0, fmt.Errorf("unpack: %w", err)
	}
	s.log.Info("image unpacked", "op", "unpack", "chain", shortID(chainID.String()), "layers", len(layers),
		"size", size, "took", time.Since(start).Round(time.Millisecond))
	return size, nil
}

// unpackedSize reports the size of the root filesystem for chainID and
// whether it exists.
func (s *Store) unpackedSize(chainID v1.Hash) (int64, bool) {
	if !exists(s.unpackedDir(chainID.String())) {
		return 0, false
	}
	if m, err := s.readUnpackedMeta(chainID.String()); err == nil {
		return m.Size, true
	}
	size, _ := treeSize(s.rootfsPath(chainID.String()))
	return size, true
}

// applyBlob applies one stored layer onto rootfs, checking that its
// uncompressed content has the diff id the image's config promises.
func (s *Store) applyBlob(ctx context.Context, rootfs string, layer layerRecord, rep *reporter) error {
	digest, err := v1.NewHash(layer.Digest)
	if err != nil {
		return fmt.Errorf("layer %q: %w", layer.Digest, err)
	}
	f, err := s.openBlob(digest)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	cr := &countingReader{r: ctxReader{ctx, f}, rep: rep, phase: PhaseUnpack, item: layer.Digest, total: st.Size()}
	rep.event(Event{Phase: PhaseUnpack, Item: layer.Digest, Total: st.Size()})
	rc, err := decompress(cr)
	if err != nil {
		return fmt.Errorf("layer %s: %w", layer.Digest, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	var sum func() v1.Hash
	if layer.DiffID != layer.Digest {
		// Uncompressed blobs were checked against their digest on the way in.
		var h io.Writer
		h, sum = hashWriter()
		r = io.TeeReader(rc, h)
	}
	if err := applyLayer(ctx, rootfs, r, s.log.With("layer", layer.Digest)); err != nil {
		return fmt.Errorf("unpack layer %s: %w", layer.Digest, err)
	}
	// Tar readers stop at the end-of-archive marker; hash the padding too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("unpack layer %s: %w", layer.Digest, err)
	}
	if sum != nil {
		if got := sum().String(); got != layer.DiffID {
			return fmt.Errorf("layer %s: uncompressed content has digest %s but the image config says %s: the image is broken: %w",
				layer.Digest, got, layer.DiffID, errdefs.ErrFailedPrecondition)
		}
	}
	cr.done()
	return nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress returns the uncompressed stream of a layer blob, recognizing
// gzip and zstd by their magic numbers (media types lie often enough).
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("layer is not valid gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("layer is not valid zstd: %w", err)
		}
		return zr.IOReadCloser(), nil
	default:
		return io.NopCloser(br), nil
	}
}
