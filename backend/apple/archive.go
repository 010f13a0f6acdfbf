package apple

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/backend"
)

// Annotations of index.json that name an image. Apple's loader reads
// com.apple.containerization.image.name; its own archives (`container
// commit`) carry the whole reference in all three, as these do.
// containerd and Tupper's image store read io.containerd.image.name.
var nameAnnotations = []string{
	"com.apple.containerization.image.name",
	"io.containerd.image.name",
	"org.opencontainers.image.ref.name",
}

// archiveTime is the time of every entry of an archive's own (not of the
// image's files), so that one image makes one archive.
var archiveTime = time.Unix(0, 0).UTC()

// writeImageArchive writes img to w as a tar of an OCI image layout
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// that holds the one image, named ref: oci-layout, index.json and the
// manifest's, config's and layers' blobs, each checked against its digest
// on the way.
func writeImageArchive(w io.Writer, img *backend.Image, ref string) error {
	manifest, err := readBlob(img.Manifest)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	config, err := readBlob(img.Config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", img.Manifest.Digest, err)
	}
	if m.Config.Digest.String() != img.Config.Digest {
		return fmt.Errorf("manifest %s names config %s, and the image's config is %s", img.Manifest.Digest, m.Config.Digest, img.Config.Digest)
	}
	var cf struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
	}
	if err := json.Unmarshal(config, &cf); err != nil {
		return fmt.Errorf("config %s: %w", img.Config.Digest, err)
	}

	lw := newLayoutWriter(w)
	for _, d := range m.Layers {
		i := slices.IndexFunc(img.Layers, func(l backend.Layer) bool { return l.Digest == d.Digest.String() })
		if i < 0 {
			return fmt.Errorf("manifest %s names layer %s, which the image does not hold", img.Manifest.Digest, d.Digest)
		}
		if err := lw.blobFile(img.Layers[i].Blob); err != nil {
			return err
		}
	}
	lw.blobBytes(config)
	mdesc := lw.blobBytes(manifest)
	mdesc.MediaType = types.MediaType(img.Manifest.MediaType)
	if mdesc.MediaType == "" {
		mdesc.MediaType = m.MediaType
	}
	if cf.OS != "" && cf.Architecture != "" {
		mdesc.Platform = &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
	}
	return lw.finish(mdesc, ref)
}

// writeRootFSArchive is writeImageArchive for an image made of the
// directory tree root alone: one uncompressed layer of it (written first
// to a file in tmp, as its digest goes into the config), a config for
// linux/arch with no settings, and a manifest.
func writeRootFSArchive(w io.Writer, root, arch, ref, tmp string) error {
	f, err := os.CreateTemp(tmp, "layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := writeLayer(cw, root); err != nil {
		return fmt.Errorf("layer of %s: %w", root, err)
	}
	layer := backend.Blob{
		Digest:    "sha256:" + hex.EncodeToString(h.Sum(nil)),
		MediaType: string(types.OCIUncompressedLayer),
		Size:      cw.n,
		Path:      f.Name(),
	}
	config, err := json.Marshal(ociConfig{
		Architecture: arch,
		OS:           "linux",
		RootFS:       ociRootFS{Type: "layers", DiffIDs: []string{layer.Digest}},
	})
	if err != nil {
		return err
	}
	lw := newLayoutWriter(w)
	if err := lw.blobFile(layer); err != nil {
		return err
	}
	cdesc := lw.blobBytes(config)
	cdesc.MediaType = types.OCIConfigJSON
	ldesc, err := descriptorOf(layer)
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        cdesc,
		Layers:        []v1.Descriptor{ldesc},
	})
	if err != nil {
		return err
	}
	mdesc := lw.blobBytes(manifest)
	mdesc.MediaType = types.OCIManifestSchema1
	mdesc.Platform = &v1.Platform{OS: "linux", Architecture: arch}
	return lw.finish(mdesc, ref)
}

// ociConfig is the part of an OCI image config a RootFS image has.
type ociConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       struct{}  `json:"config"`
	RootFS       ociRootFS `json:"rootfs"`
}

type ociRootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// layoutWriter writes the entries of an OCI image layout to a tar stream.
// Its first error sticks: later calls do nothing and finish returns it.
type layoutWriter struct {
	tw      *tar.Writer
	written map[string]bool // blob digests
	err     error
}

func newLayoutWriter(w io.Writer) *layoutWriter {
	lw := &layoutWriter{tw: tar.NewWriter(w), written: map[string]bool{}}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		lw.header(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	return lw
}

func (lw *layoutWriter) header(h *tar.Header) {
	if lw.err != nil {
		return
	}
	h.ModTime, h.Format = archiveTime, tar.FormatPAX
	lw.err = lw.tw.WriteHeader(h)
}

func (lw *layoutWriter) file(name string, data []byte) {
	lw.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))})
	if lw.err == nil {
		_, lw.err = lw.tw.Write(data)
	}
}

// blobBytes adds data as a blob and returns its descriptor, without a
// media type.
func (lw *layoutWriter) blobBytes(data []byte) v1.Descriptor {
	sum := sha256.Sum256(data)
	d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if !lw.written[d.String()] {
		lw.written[d.String()] = true
		lw.file("blobs/sha256/"+d.Hex, data)
	}
	return v1.Descriptor{Digest: d, Size: int64(len(data))}
}

// blobFile adds the file of b as a blob, checking its size and digest.
func (lw *layoutWriter) blobFile(b backend.Blob) error {
	d, err := v1.NewHash(b.Digest)
	if err != nil || d.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: not a sha256 digest", b.Digest)
	}
	if lw.written[b.Digest] || lw.err != nil {
		return lw.err
	}
	f, err := os.Open(b.Path)
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.Digest, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.Digest, err)
	}
	if st.Size() != b.Size {
		return fmt.Errorf("blob %s: %s is %d bytes, and the image says %d", b.Digest, b.Path, st.Size(), b.Size)
	}
	lw.header(&tar.Header{Typeflag: tar.TypeReg, Name: "blobs/sha256/" + d.Hex, Mode: 0o644, Size: b.Size})
	if lw.err != nil {
		return lw.err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(lw.tw, h), f); err != nil {
		lw.err = fmt.Errorf("blob %s: %w", b.Digest, err)
		return lw.err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Hex {
		lw.err = fmt.Errorf("blob %s: %s holds sha256:%s: the image store's file is damaged", b.Digest, b.Path, got)
		return lw.err
	}
	lw.written[b.Digest] = true
	return nil
}

// finish writes oci-layout and an index.json that names manifest ref, and
// closes the archive.
func (lw *layoutWriter) finish(manifest v1.Descriptor, ref string) error {
	manifest.Annotations = map[string]string{}
	for _, k := range nameAnnotations {
		manifest.Annotations[k] = ref
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     []v1.Descriptor{manifest},
	})
	if err != nil {
		return err
	}
	lw.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	lw.file("index.json", index)
	if lw.err != nil {
		return lw.err
	}
	return lw.tw.Close()
}

// readBlob reads a small blob (a manifest, a config) and checks it.
func readBlob(b backend.Blob) ([]byte, error) {
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != b.Digest {
		return nil, fmt.Errorf("%s holds %s, not %s: the image store's file is damaged", b.Path, got, b.Digest)
	}
	return data, nil
}

func descriptorOf(b backend.Blob) (v1.Descriptor, error) {
	d, err := v1.NewHash(b.Digest)
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.MediaType(b.MediaType), Size: b.Size, Digest: d}, nil
}

// writeLayer writes the directory tree root to w as an uncompressed layer
// tar: every file, directory, symlink and device node with its mode,
// owner and modification time, hard links as links to the first name, and
// root itself as "./" so that the image's root keeps its mode. Sockets
// and extended attributes are left out.
func writeLayer(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[fileID]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var target string
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, target)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		h.Name = filepath.ToSlash(rel)
		if rel == "." {
			h.Name = "."
		}
		if info.IsDir() {
			h.Name += "/"
		}
		h.Format = tar.FormatPAX
		h.Uname, h.Gname = "", ""
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if info.Mode().IsRegular() {
			if id, ok := identity(info); ok {
				if first, seen := links[id]; seen {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					links[id] = h.Name
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		} else if n != h.Size {
			return fmt.Errorf("%s changed while it was read", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// fileID names a file's inode, to find hard links.
type fileID struct{ dev, ino uint64 }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
