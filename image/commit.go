package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/errdefs"
)

// CommitOptions describe an image made of another and one layer more: a
// step of a template build.
type CommitOptions struct {
	// Parent names the image the new one stacks on (a name or an id).
	Parent string
	// Layer is the new layer's file: an uncompressed tar in the OCI layer
	// format (deletions as ".wh." files). It is read, not kept: the store
	// copies it. Empty means no layer: the new image is Parent's files
	// with another config (as Docker's ENV and LABEL make), and shares
	// Parent's unpacked root filesystem.
	Layer string
	// CreatedBy describes the step in the image's history.
	CreatedBy string
	// Edit, when set, changes the new image's config (its environment,
	// user, working directory, labels).
	Edit func(*v1.Config)
	// Names name the new image; none leaves it to be found by its id.
	Names []string
	// Unpack unpacks the new image's root filesystem now, from its
	// parent's when that is unpacked; else it is unpacked by the first
	// Resolve that needs it (a cache entry may never be).
	Unpack bool
}

// Commit stores a new image: Parent's layers and opts.Layer (if any),
// with Parent's config changed by opts.Edit.
func (s *Store) Commit(ctx context.Context, opts CommitOptions) (*Image, error) {
	rep := newReporter(nil)
	end, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	parent, _ := idx.lookup(opts.Parent)
	if parent == nil {
		return nil, notFound(opts.Parent)
	}
	names := make([]string, 0, len(opts.Names))
	for _, n := range opts.Names {
		nn, err := NormalizeName(n)
		if err != nil {
			return nil, err
		}
		names = append(names, nn)
	}
	parentDigest, err := v1.NewHash(parent.ID)
	if err != nil {
		return nil, err
	}
	raw, err := s.readBlob(parentDigest)
	if err != nil {
		return nil, fmt.Errorf("commit: parent config: %w", err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("commit: parent config: %w", err)
	}

	now := time.Now().UTC()
	cfg.Created = v1.Time{Time: now}
	cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: now}, CreatedBy: opts.CreatedBy, EmptyLayer: opts.Layer == ""})
	layers := make([]layerSource, 0, len(parent.Layers)+1)
	for _, l := range parent.Layers {
		d, err := v1.NewHash(l.Digest)
		if err != nil {
			return nil, err
		}
		layers = append(layers, layerSource{blobSource: blobSource{Digest: d, Size: l.Size}, MediaType: types.MediaType(l.MediaType)})
	}
	if opts.Layer != "" {
		diffID, size, err := fileDigest(opts.Layer)
		if err != nil {
			return nil, fmt.Errorf("commit: layer: %w", err)
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
		layers = append(layers, layerSource{
			blobSource: blobSource{Digest: diffID, Size: size, Open: func() (io.ReadCloser, error) { return os.Open(opts.Layer) }},
			DiffID:     diffID, MediaType: types.OCIUncompressedLayer,
		})
	}
	if opts.Edit != nil {
		opts.Edit(&cfg.Config)
	}
	rawConfig, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return s.ingest(ctx, ingestRequest{
		names: names, rawConfig: rawConfig, layers: layers, lazy: !opts.Unpack,
		source: "commit of " + shortID(parent.ID) + ": " + opts.CreatedBy,
	}, rep)
}

// readBlob reads a small blob (a config) whole.
func (s *Store) readBlob(d v1.Hash) ([]byte, error) {
	f, err := s.openBlob(d)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// fileDigest returns the sha256 digest and size of the file at path.
func fileDigest(path string) (v1.Hash, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer f.Close()
	return v1.SHA256(f)
}

// cloneUnpacked copies the unpacked root filesystem of the longest prefix
// of layers that is unpacked already into rootfs (which must not exist),
// and returns how many layers it holds: 0 when none is.
func (s *Store) cloneUnpacked(ctx context.Context, layers []layerRecord, rootfs string) (int, error) {
	diffIDs := make([]v1.Hash, len(layers))
	for i, l := range layers {
		d, err := v1.NewHash(l.DiffID)
		if err != nil {
			return 0, nil
		}
		diffIDs[i] = d
	}
	for k := len(layers) - 1; k > 0; k-- {
		src := s.rootfsPath(chainID(diffIDs[:k]).String())
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		// cp keeps owners, modes, links, times and xattrs, and shares
		// blocks where the file system can (reflinks).
		out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", src, rootfs).CombinedOutput()
		if err != nil {
			os.RemoveAll(rootfs)
			return 0, fmt.Errorf("copy the unpacked parent %s: %w: %s", filepath.Base(filepath.Dir(src)), err, bytes.TrimSpace(out))
		}
		return k, nil
	}
	return 0, nil
}

// unpackOnDemand unpacks the root filesystem of r, an image whose commit
// left it for later.
func (s *Store) unpackOnDemand(ctx context.Context, r *record) error {
	d, err := v1.NewHash(r.ChainID)
	if err != nil {
		return fmt.Errorf("image %s: chain id: %w: %w", shortID(r.ID), err, errdefs.ErrFailedPrecondition)
	}
	for _, l := range r.Layers {
		ld, err := v1.NewHash(l.Digest)
		if err != nil || !s.hasBlob(ld) {
			return fmt.Errorf("image %s: layer %s is missing: remove the image and build it again: %w", shortID(r.ID), l.Digest, errdefs.ErrFailedPrecondition)
		}
	}
	// As every writer: a collection must not run meanwhile, or it would
	// take the tree being built (in tmp/) or the one it is copied from.
	end, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer end()
	_, err = s.ensureUnpacked(ctx, d, r.Layers, newReporter(nil))
	return err
}
