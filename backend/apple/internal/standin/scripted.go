package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// scripted is the engine of the scripted mode: no sandbox runs; every
// container that starts runs at addr until it is killed.
type scripted struct {
	dir  string
	addr netip.Addr
}

// nameAnnotations are the annotations of index.json that may name an
// image, in the order Apple's loader prefers them.
var nameAnnotations = []string{
	"com.apple.containerization.image.name",
	"io.containerd.image.name",
	"org.opencontainers.image.ref.name",
}

// loadImage checks the archive at p as an OCI image layout, as strictly as
// go-containerregistry's validate package does (every blob's digest and
// size, every layer's diff ID), and records the images it names.
func (s *scripted) loadImage(ctx context.Context, p string) ([]string, error) {
	tmp, err := os.MkdirTemp(s.dir, "load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := extract(p, tmp); err != nil {
		return nil, fmt.Errorf("failed to load archive %s: %w", p, err)
	}
	lp, err := layout.FromPath(tmp)
	if err != nil {
		return nil, fmt.Errorf("failed to load archive %s: not an OCI image layout: %w", p, err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("failed to load archive %s: %w", p, err)
	}
	// validate reads layers as gzip streams only: Fast skips their
	// bytes, which checkLayers reads.
	if err := validate.Index(ii, validate.Fast); err != nil {
		return nil, fmt.Errorf("failed to load archive %s: invalid image: %w", p, err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		img, err := ii.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("failed to load archive %s: %w", p, err)
		}
		if err := checkLayers(img); err != nil {
			return nil, fmt.Errorf("failed to load archive %s: invalid image %s: %w", p, d.Digest, err)
		}
	}
	imgs, err := s.images(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range im.Manifests {
		var name string
		for _, k := range nameAnnotations {
			if name = d.Annotations[k]; name != "" {
				break
			}
		}
		if name == "" {
			return nil, fmt.Errorf("failed to load archive %s: manifest %s has no name", p, d.Digest)
		}
		if d.Platform == nil || d.Platform.OS != "linux" {
			return nil, fmt.Errorf("failed to load archive %s: manifest %s is for no linux platform", p, d.Digest)
		}
		imgs = slices.DeleteFunc(imgs, func(i imageInfo) bool { return i.Reference == name })
		imgs = append(imgs, imageInfo{Reference: name, MediaType: string(d.MediaType), Digest: d.Digest.String(), Size: d.Size})
		names = append(names, name)
	}
	b, err := json.Marshal(imgs)
	if err != nil {
		return nil, err
	}
	return names, os.WriteFile(filepath.Join(s.dir, "images.json"), b, 0o644)
}

// checkLayers checks each layer's bytes against its digest and size, and
// its uncompressed bytes (gzip, zstd or none) against the config's diff ID.
func checkLayers(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return fmt.Errorf("the config lists %d diff IDs for %d layers", len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	for i, d := range m.Layers {
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		got, n, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if got != d.Digest || n != d.Size {
			return fmt.Errorf("layer %s: the blob is %d bytes with digest %s", d.Digest, n, got)
		}
		rc, err = l.Uncompressed()
		if err != nil {
			return err
		}
		diff, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if diff != cf.RootFS.DiffIDs[i] {
			return fmt.Errorf("layer %s: uncompressed it is %s, and the config says %s", d.Digest, diff, cf.RootFS.DiffIDs[i])
		}
	}
	return nil
}

// extract unpacks the regular files and directories of the tar at p into
// dir.
func extract(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if name == "." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			out, err := os.Create(dst)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: an OCI image layout holds files and directories only", h.Name)
		}
	}
}

func (s *scripted) images(context.Context) ([]imageInfo, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "images.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var imgs []imageInfo
	return imgs, json.Unmarshal(b, &imgs)
}

func (s *scripted) image(ctx context.Context, ref string) (*imageInfo, error) {
	imgs, err := s.images(ctx)
	if err != nil {
		return nil, err
	}
	for _, i := range imgs {
		if i.Reference == ref {
			return &i, nil
		}
	}
	return nil, fmt.Errorf("image %s not found (the stand-in pulls nothing)", ref)
}

// start checks that c's entrypoint is an executable in one of its mounts,
// and gives it the scripted address.
func (s *scripted) start(_ context.Context, c *container) error {
	p, err := c.hostPath(c.Entrypoint)
	if err != nil {
		return err
	}
	if st, err := os.Stat(p); err != nil {
		return fmt.Errorf("entrypoint %s: %w", c.Entrypoint, err)
	} else if st.Mode()&0o111 == 0 {
		return fmt.Errorf("entrypoint %s: not executable", c.Entrypoint)
	}
	c.Addr = s.addr.String()
	return nil
}

func (s *scripted) alive(context.Context, *container) (bool, error) { return true, nil }

func (s *scripted) stop(context.Context, *container) error { return nil }

func (s *scripted) stats(_ context.Context, c *container) (*statsJSON, error) {
	return &statsJSON{MemoryUsageBytes: 64 << 20, MemoryLimitBytes: uint64(c.MemoryBytes), CPUUsageUsec: 1234567, NumProcesses: 3}, nil
}

func (s *scripted) close() {}
