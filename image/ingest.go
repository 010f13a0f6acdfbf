package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/errdefs"
)

// maxParallelBlobs is how many blobs one operation copies at once.
const maxParallelBlobs = 3

// layerSource is one layer on its way into the store: the blob as the store
// will keep it, and what it holds.
type layerSource struct {
	blobSource
	// DiffID is the digest of the uncompressed layer; zero means "take it
	// from the config".
	DiffID    v1.Hash
	MediaType types.MediaType
}

// ingestRequest is an image on its way into the store, whatever its source.
type ingestRequest struct {
	names     []string // normalized
	rawConfig []byte
	layers    []layerSource
	source    string // for the index and logs: "pull localhost:5000/x:y", "import", "mmdebstrap …"
	// lazy leaves the root filesystem to be unpacked by the first Resolve
	// (see Commit).
	lazy bool
}

// ingest stores an image's blobs, unpacks its root filesystem, writes its
// config and manifest and points its names at it. Everything already in the
// store is reused. Callers hold the write mark (beginWrite).
func (s *Store) ingest(ctx context.Context, req ingestRequest, rep *reporter) (*Image, error) {
	cfg, err := v1.ParseConfigFile(bytes.NewReader(req.rawConfig))
	if err != nil {
		return nil, fmt.Errorf("image config is not valid: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if n, m := len(cfg.RootFS.DiffIDs), len(req.layers); n != m {
		return nil, fmt.Errorf("image config lists %d layers but the manifest has %d: the image is broken: %w", n, m, errdefs.ErrInvalidArgument)
	}
	layers := make([]layerRecord, len(req.layers))
	for i := range req.layers {
		l := &req.layers[i]
		want := cfg.RootFS.DiffIDs[i]
		if l.DiffID == (v1.Hash{}) {
			l.DiffID = want
		} else if l.DiffID != want {
			return nil, fmt.Errorf("layer %d: diff id %s differs from %s in the image config: the image is broken: %w", i, l.DiffID, want, errdefs.ErrInvalidArgument)
		}
		if err := checkDigest(l.DiffID); err != nil {
			return nil, err
		}
		mt, err := ociLayerType(l.MediaType)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, l.Digest, err)
		}
		layers[i] = layerRecord{Digest: l.Digest.String(), DiffID: l.DiffID.String(), MediaType: string(mt), Size: l.Size}
	}
	chain := chainID(cfg.RootFS.DiffIDs)

	if err := s.fetchBlobs(ctx, req.layers, rep); err != nil {
		return nil, err
	}
	for i, l := range req.layers {
		if l.Size < 0 {
			if st, err := s.blobStat(l.Digest); err == nil {
				layers[i].Size = st
			}
		}
	}
	var size int64
	if req.lazy {
		for _, l := range layers {
			size += l.Size
		}
	} else if size, err = s.ensureUnpackedUnlessBlobsOnly(ctx, chain, layers, rep); err != nil {
		return nil, err
	}

	configDigest, err := s.putBlobBytes(ctx, req.rawConfig)
	if err != nil {
		return nil, err
	}
	manifest := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(req.rawConfig)), Digest: configDigest},
	}
	for _, l := range layers {
		d, _ := v1.NewHash(l.Digest)
		manifest.Layers = append(manifest.Layers, v1.Descriptor{MediaType: types.MediaType(l.MediaType), Size: l.Size, Digest: d})
	}
	rawManifest, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	manifestDigest, err := s.putBlobBytes(ctx, rawManifest)
	if err != nil {
		return nil, err
	}

	created := cfg.Created.Time
	if created.IsZero() {
		created = time.Now().UTC()
	}
	rec := &record{
		ID:       configDigest.String(),
		Manifest: manifestDigest.String(),
		ChainID:  chain.String(),
		Layers:   layers,
		Config: ImageConfig{
			Env:        cfg.Config.Env,
			Entrypoint: cfg.Config.Entrypoint,
			Cmd:        cfg.Config.Cmd,
			WorkingDir: cfg.Config.WorkingDir,
			User:       cfg.Config.User,
			Labels:     cfg.Config.Labels,
		},
		Size:    size,
		Created: created,
		Source:  req.source,
	}
	var img *Image
	err = s.updateIndex(ctx, func(idx *indexFile) error {
		idx.Images[rec.ID] = rec
		idx.setNames(rec.ID, req.names)
		img = s.image(idx, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("image stored", "op", "ingest", "image", rec.ID, "names", img.Names, "source", req.source)
	for _, n := range img.Names {
		rep.event(Event{Phase: PhaseDone, Item: n, Message: rec.ID})
	}
	return img, nil
}

// fetchBlobs stores the layers' blobs, a few at a time.
func (s *Store) fetchBlobs(ctx context.Context, layers []layerSource, rep *reporter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(layers))
	for _, l := range layers {
		if !s.hasBlob(l.Digest) {
			rep.event(Event{Phase: PhaseDownload, Item: l.Digest.String(), Total: max(l.Size, 0)})
		}
	}
	sem := make(chan struct{}, maxParallelBlobs)
	var wg sync.WaitGroup
	for i, l := range layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			copied, err := s.putBlob(ctx, l.blobSource, rep, PhaseDownload)
			if err != nil {
				errs[i] = fmt.Errorf("layer %s: %w", l.Digest, err)
				cancel()
				return
			}
			if !copied {
				rep.event(Event{Phase: PhaseDownload, Item: l.Digest.String(), Done: true, Message: "already present"})
			}
		}()
	}
	wg.Wait()
	// Report the failure that caused the others to be cancelled.
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (s *Store) blobStat(d v1.Hash) (int64, error) {
	f, err := s.openBlob(d)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// chainID names a stack of layers, as the OCI image spec defines it: the
// stack's root filesystem is the same whatever image it comes from.
func chainID(diffIDs []v1.Hash) v1.Hash {
	if len(diffIDs) == 0 {
		return sha256Hash(nil)
	}
	c := diffIDs[0]
	for _, d := range diffIDs[1:] {
		c = sha256Hash([]byte(c.String() + " " + d.String()))
	}
	return c
}

// ociLayerType returns the OCI media type for a layer's media type, or an
// error if it is not a filesystem layer.
func ociLayerType(mt types.MediaType) (types.MediaType, error) {
	switch mt {
	case types.DockerLayer:
		return types.OCILayer, nil
	case types.DockerUncompressedLayer:
		return types.OCIUncompressedLayer, nil
	case types.DockerForeignLayer:
		return types.OCIRestrictedLayer, nil
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return mt, nil
	}
	return "", fmt.Errorf("media type %q is not a filesystem layer: this is not a container image: %w", mt, errdefs.ErrNotSupported)
}
