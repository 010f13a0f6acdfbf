package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/errdefs"
)

// Annotations that name an image in an OCI image layout.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// maxLayoutFile bounds index.json and oci-layout read from an archive.
const maxLayoutFile = 16 << 20

// Import stores the images in an archive read from r: a `docker save` tarball
// (manifest.json at its top) or a tarball of an OCI image layout (index.json
// and blobs/). The archive's own names (repository tags, or the
// io.containerd.image.name / org.opencontainers.image.ref.name annotations)
// name the images; a non-empty name replaces them, and then the archive must
// hold exactly one image. From a multi-platform index, the image for
// linux on this machine's architecture is taken.
//
// r is read once; unless it is a regular file it is first copied to the
// store's temporary directory.
func (s *Store) Import(ctx context.Context, r io.Reader, name string, progress Progress) ([]*Image, error) {
	rep := newReporter(progress)
	end, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil {
				return s.importArchive(ctx, io.NewSectionReader(f, off, st.Size()-off), f.Name(), name, rep)
			}
		}
	}
	f, err := os.CreateTemp(s.path("tmp"), "import-")
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cr := &countingReader{r: ctxReader{ctx, r}, rep: rep, phase: PhaseRead, item: "archive"}
	n, err := io.Copy(f, cr)
	if err != nil {
		return nil, fmt.Errorf("import: read archive: %w", err)
	}
	cr.done()
	return s.importArchive(ctx, io.NewSectionReader(f, 0, n), "archive", name, rep)
}

// ImportFile is Import of the archive at path.
func (s *Store) ImportFile(ctx context.Context, path, name string, progress Progress) ([]*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	return s.Import(ctx, f, name, progress)
}

// archiveFormat is the kind of image archive.
type archiveFormat int

const (
	formatUnknown archiveFormat = iota
	formatDockerSave
	formatOCILayout
)

// detectFormat looks at the names at the top of the archive. Archives of
// Docker 25 and later hold both layouts; manifest.json is preferred then.
func detectFormat(ar *io.SectionReader) (archiveFormat, error) {
	tr := tar.NewReader(io.NewSectionReader(ar, 0, ar.Size()))
	var hasIndex bool
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return formatUnknown, fmt.Errorf("import: the archive is not a tar file (%v): give a `docker save` tarball or a tar of an OCI image layout: %w", err, errdefs.ErrInvalidArgument)
		}
		p, err := cleanPath(hdr.Name)
		if err != nil {
			continue
		}
		switch p {
		case "manifest.json":
			return formatDockerSave, nil
		case "index.json":
			hasIndex = true
		}
	}
	if hasIndex {
		return formatOCILayout, nil
	}
	return formatUnknown, fmt.Errorf("import: the archive has neither manifest.json (docker save) nor index.json (OCI image layout) at its top: give a `docker save` tarball or a tar of an OCI image layout: %w", errdefs.ErrInvalidArgument)
}

func (s *Store) importArchive(ctx context.Context, ar *io.SectionReader, label, name string, rep *reporter) ([]*Image, error) {
	var override []string
	if name != "" {
		n, err := NormalizeName(name)
		if err != nil {
			return nil, err
		}
		override = []string{n}
	}
	rep.message(PhaseResolve, label, "reading archive")
	format, err := detectFormat(ar)
	if err != nil {
		return nil, err
	}
	if format == formatDockerSave {
		return s.importDockerSave(ctx, ar, override, rep)
	}
	return s.importOCILayout(ctx, ar, label, override, rep)
}

func (s *Store) importDockerSave(ctx context.Context, ar *io.SectionReader, override []string, rep *reporter) ([]*Image, error) {
	opener := func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(ar, 0, ar.Size())), nil }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("import: manifest.json: %w: the archive is not a valid `docker save` tarball: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("import: manifest.json lists no images: %w", errdefs.ErrInvalidArgument)
	}
	if override != nil && len(m) != 1 {
		return nil, fmt.Errorf("import: the archive holds %d images, so one name cannot fit them all: import it without a name to use the archive's own: %w",
			len(m), errdefs.ErrInvalidArgument)
	}
	// Check every name before storing anything.
	names := make([][]string, len(m))
	for i, d := range m {
		if override != nil {
			names[i] = override
			continue
		}
		if len(d.RepoTags) == 0 {
			return nil, fmt.Errorf("import: image %d in the archive (%s) has no name: pass a name to import it: %w", i+1, d.Config, errdefs.ErrInvalidArgument)
		}
		if names[i], err = normalizeNames(d.RepoTags); err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
	}
	var out []*Image
	for i, d := range m {
		var tag *name.Tag
		if len(m) > 1 {
			t, err := name.NewTag(d.RepoTags[0])
			if err != nil {
				return nil, fmt.Errorf("import: tag %q: %w: %w", d.RepoTags[0], err, errdefs.ErrInvalidArgument)
			}
			tag = &t
		}
		img, err := tarball.Image(opener, tag)
		if err != nil {
			return nil, fmt.Errorf("import: image %d in the archive: %w: %w", i+1, err, errdefs.ErrInvalidArgument)
		}
		req, err := imageRequest(img, names[i], "import (docker save)", uncompressedLayer)
		if err != nil {
			return nil, fmt.Errorf("import: image %d in the archive: %w", i+1, err)
		}
		stored, err := s.ingest(ctx, req, rep)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", strings.Join(names[i], ", "), err)
		}
		out = append(out, stored)
	}
	return out, nil
}

// imageRequest describes img for ingest: its config, and its layers as
// layerOf sees them. Each source (registry, docker save, OCI layout) differs
// only in where a layer's bytes come from.
func imageRequest(img v1.Image, names []string, source string, layerOf func(v1.Layer) (layerSource, error)) (ingestRequest, error) {
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return ingestRequest{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return ingestRequest{}, err
	}
	srcs := make([]layerSource, len(layers))
	for i, l := range layers {
		if srcs[i], err = layerOf(l); err != nil {
			return ingestRequest{}, err
		}
	}
	return ingestRequest{names: names, rawConfig: rawConfig, layers: srcs, source: source}, nil
}

// uncompressedLayer is a layer of a `docker save` tarball, stored
// uncompressed as the tarball holds it: compressing it would cost more time
// than the disk it saves.
func uncompressedLayer(l v1.Layer) (layerSource, error) {
	diffID, err := l.DiffID()
	if err != nil {
		return layerSource{}, err
	}
	return layerSource{
		blobSource: blobSource{Digest: diffID, Size: -1, Open: l.Uncompressed},
		DiffID:     diffID,
		MediaType:  types.OCIUncompressedLayer,
	}, nil
}

// compressedLayer is a layer stored as its blob is, compressed.
func compressedLayer(l v1.Layer) (layerSource, error) {
	d, err := l.Digest()
	if err != nil {
		return layerSource{}, err
	}
	size, err := l.Size()
	if err != nil {
		return layerSource{}, err
	}
	mt, err := l.MediaType()
	if err != nil {
		return layerSource{}, err
	}
	return layerSource{blobSource: blobSource{Digest: d, Size: size, Open: l.Compressed}, MediaType: mt}, nil
}

// importOCILayout imports a tar of an OCI image layout. Its blobs go straight
// into the blob store (checked against their names); index.json is read from
// a scratch layout whose blobs/ is the store's own.
func (s *Store) importOCILayout(ctx context.Context, ar *io.SectionReader, label string, override []string, rep *reporter) ([]*Image, error) {
	dir, err := os.MkdirTemp(s.path("tmp"), "layout-")
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer os.RemoveAll(dir) // holds two small files and a symlink; never follows it
	cr := &countingReader{r: ctxReader{ctx, io.NewSectionReader(ar, 0, ar.Size())}, rep: rep, phase: PhaseRead, item: label, total: ar.Size()}
	tr := tar.NewReader(cr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("import: read archive: %w", err)
		}
		p, err := cleanPath(hdr.Name)
		if err != nil || hdr.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case p == "index.json" || p == "oci-layout":
			if hdr.Size > maxLayoutFile {
				return nil, fmt.Errorf("import: %s is %d bytes, too big to be real: %w", p, hdr.Size, errdefs.ErrInvalidArgument)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("import: read %s: %w", p, err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), b, 0o600); err != nil {
				return nil, fmt.Errorf("import: %w", err)
			}
		case strings.HasPrefix(p, "blobs/sha256/"):
			d := v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(p, "blobs/sha256/")}
			if checkDigest(d) != nil {
				continue
			}
			if _, err := s.putBlob(ctx, blobSource{Digest: d, Size: hdr.Size, Open: func() (io.ReadCloser, error) { return io.NopCloser(tr), nil }}, nil, PhaseRead); err != nil {
				return nil, fmt.Errorf("import: %w", err)
			}
		}
	}
	cr.done()
	if !exists(filepath.Join(dir, "oci-layout")) {
		if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o600); err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
	}
	if err := os.Symlink(s.path("blobs"), filepath.Join(dir, "blobs")); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("import: OCI image layout: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("import: OCI image layout index.json: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("import: OCI image layout index.json: %w: %w", err, errdefs.ErrInvalidArgument)
	}

	plat := defaultPlatform()
	type entry struct {
		img   v1.Image
		names []string
	}
	var entries []entry
	for _, desc := range im.Manifests {
		if desc.Platform != nil && !desc.Platform.Satisfies(plat) {
			continue
		}
		img, err := pickImage(ii, desc, plat)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		if img == nil {
			continue // not an image: an attestation, a signature, an artifact
		}
		names := override
		if names == nil {
			n := desc.Annotations[annotationContainerdName]
			if n == "" {
				n = desc.Annotations[annotationRefName]
			}
			if n == "" {
				return nil, fmt.Errorf("import: image %s in the archive has no name: pass a name to import it: %w", desc.Digest, errdefs.ErrInvalidArgument)
			}
			if names, err = normalizeNames([]string{n}); err != nil {
				return nil, fmt.Errorf("import: %w", err)
			}
		}
		entries = append(entries, entry{img: img, names: names})
	}
	switch {
	case len(entries) == 0:
		return nil, fmt.Errorf("import: the archive holds no image for %s: %w", plat, errdefs.ErrNotFound)
	case override != nil && len(entries) > 1:
		return nil, fmt.Errorf("import: the archive holds %d images, so one name cannot fit them all: import it without a name to use the archive's own: %w",
			len(entries), errdefs.ErrInvalidArgument)
	}
	var out []*Image
	for _, e := range entries {
		// An OCI layout's blobs are in the store already.
		req, err := imageRequest(e.img, e.names, "import (OCI layout)", compressedLayer)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", strings.Join(e.names, ", "), err)
		}
		stored, err := s.ingest(ctx, req, rep)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", strings.Join(e.names, ", "), err)
		}
		out = append(out, stored)
	}
	return out, nil
}

// pickImage returns the image desc means: itself, or for an index the
// image for plat in it. It returns nil for descriptors that are not images.
func pickImage(ii v1.ImageIndex, desc v1.Descriptor, plat v1.Platform) (v1.Image, error) {
	switch desc.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		return ii.Image(desc.Digest)
	case types.OCIImageIndex, types.DockerManifestList:
		child, err := ii.ImageIndex(desc.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, c := range cm.Manifests {
			if c.Platform == nil || !c.Platform.Satisfies(plat) {
				continue
			}
			if img, err := pickImage(child, c, plat); img != nil || err != nil {
				return img, err
			}
		}
		return nil, fmt.Errorf("index %s has no image for %s: %w", desc.Digest, plat, errdefs.ErrNotFound)
	}
	return nil, nil
}
