package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/lightbearco/tupper/errdefs"
)

// Config configures a Store.
type Config struct {
	// Root is the directory that holds the store. It is created if missing
	// and made private to its owner (unpacked images hold set-user-ID files).
	Root string
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// BlobsOnly keeps images as their blobs alone, never unpacked: for
	// backends that take an image as layers (Apple's containers, WSL)
	// and for hosts that cannot unpack one (only Linux can: its owners,
	// modes and device files need Linux's file system). Images then have
	// no RootFS, and Size is the size of their layers. A store off Linux
	// is always blobs-only.
	BlobsOnly bool
}

// Validate reports what is wrong with c, if anything.
func (c Config) Validate() error {
	if c.Root == "" {
		return fmt.Errorf("image store: Root is required: set it to a directory such as /var/lib/tupper/images: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// Store is a content-addressed image store on the local disk.
//
// Blobs (manifests, configs, layers) are kept once each, named by their sha256
// digest. Each image's layers are unpacked once into a root filesystem
// directory that every sandbox shares read-only: backends make their own
// copy-on-write views of it, and nothing may write to it. Images sharing the
// same stack of layers share one root filesystem.
//
// A Store is safe for concurrent use by goroutines and by processes that open
// the same Root: changes to the name index are serialized by a file lock and
// written atomically, and root filesystems and blobs appear in the store by a
// rename only once complete.
type Store struct {
	root      string
	log       *slog.Logger
	blobsOnly bool
}

// Image is an image in the store.
type Image struct {
	// ID is the digest of the image's config ("sha256:…").
	ID string
	// Names are the image's names, normalized (see NormalizeName) and sorted.
	Names []string
	// RootFS is the absolute host path of the unpacked root filesystem. It is
	// shared by all sandboxes and must never be written to.
	RootFS string
	// Config is what the image says about how to run it.
	Config ImageConfig
	// Size is the number of bytes of the unpacked root filesystem.
	Size int64
	// Created is when the image was made, as its config says; if the config
	// does not say, when the store first got it.
	Created time.Time
	// ChainID names the image's stack of layers: images with equal stacks
	// share it, and their RootFS.
	ChainID string
	// Manifest and ConfigBlob are the image's OCI manifest and config, and
	// Layers its layer blobs, lowest first: files in the store, for
	// backends that need the image in another form than a directory.
	Manifest   Blob
	ConfigBlob Blob
	Layers     []Layer
}

// Blob is one content-addressed file in the store.
type Blob struct {
	Digest    string
	MediaType string
	Size      int64
	// Path is the blob's file; it must never be written.
	Path string
}

// Layer is a layer blob and the digest of its uncompressed content.
type Layer struct {
	Blob
	DiffID string
}

// ImageConfig is the part of an image's config that decides how its
// processes run.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	// Labels are the image's OCI labels; LabelCodeInterpreter among
	// them tells the engine to start the code interpreter.
	Labels map[string]string `json:"labels,omitempty"`
}

// Open opens the store at cfg.Root, creating its directories if needed.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("image store root %q: %w", cfg.Root, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{root: root, log: log.With("component", "image"), blobsOnly: cfg.BlobsOnly || !canUnpack}
	for _, d := range []string{"", "blobs", filepath.Join("blobs", "sha256"), "unpacked", "locks", "tmp", "leases"} {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("create image store directory %s: %w: check that the parent exists and is writable", p, err)
		}
	}
	// The store may hold set-user-ID binaries from any image; keep other host
	// users out of it.
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("image store root %s: %w", root, err)
	}
	return s, nil
}

// Close releases the store. A Store keeps no files open between calls, so
// Close has nothing to do and returns nil; it is there so owners can release
// the store like their other resources. Operations still running finish.
func (s *Store) Close() error { return nil }

// Root returns the store's root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

func (s *Store) indexPath() string { return s.path("index.json") }

// unpackedDir is where the root filesystem for a chain id lives, with its
// metadata beside it.
func (s *Store) unpackedDir(chainID string) string {
	return s.path("unpacked", strings.TrimPrefix(chainID, idPrefix))
}

func (s *Store) rootfsPath(chainID string) string {
	return filepath.Join(s.unpackedDir(chainID), "rootfs")
}

// imageRootFS is Image.RootFS of an image of chainID: none in a blobs-only
// store.
func (s *Store) imageRootFS(chainID string) string {
	if s.blobsOnly {
		return ""
	}
	return s.rootfsPath(chainID)
}

// notFound is the error for a name that matches no image.
func notFound(name string) error {
	short := strings.TrimSuffix(name, ":latest")
	if alias, ok := TemplateAliases[short]; ok {
		short = alias
	}
	if _, ok := Recipes[short]; ok {
		return fmt.Errorf("image %q not found: build it with `tupper image build %s` (a few minutes, once): %w", name, short, errdefs.ErrNotFound)
	}
	return fmt.Errorf("image %q not found: pull it with `tupper image pull` or build it with `tupper image build`: %w", name, errdefs.ErrNotFound)
}

// Resolve returns the image that name means: a name (any spelling of it, see
// NormalizeName), an image id or a unique prefix of one of at least 12 hex
// digits. An unknown name is an error of class errdefs.ErrNotFound. Resolve
// only reads, but for unpacking an image whose root filesystem is not yet
// (see Commit).
func (s *Store) Resolve(ctx context.Context, name string) (*Image, error) {
	img, r, err := s.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if s.blobsOnly {
		return img, nil
	}
	if _, err := os.Lstat(img.RootFS); err != nil {
		// A committed image is unpacked when first needed; any other
		// image whose tree went is rebuilt from its layers, if the store
		// still has them.
		if uerr := s.unpackOnDemand(ctx, r); uerr != nil {
			return nil, fmt.Errorf("image %q (%s): its root filesystem %s is missing (%v) and cannot be unpacked: %w",
				name, shortID(r.ID), img.RootFS, err, uerr)
		}
	}
	return img, nil
}

// Lookup is Resolve without unpacking: it returns the image name means
// whether its root filesystem is there or not (Image.RootFS may not
// exist). A build's cache is looked up so: a cached step's image is
// unpacked only if a sandbox boots from it.
func (s *Store) Lookup(ctx context.Context, name string) (*Image, error) {
	img, _, err := s.lookup(ctx, name)
	return img, err
}

// lookup finds the image name means in the index, and its record.
func (s *Store) lookup(ctx context.Context, name string) (*Image, *record, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	idx, err := s.readIndex()
	if err != nil {
		return nil, nil, err
	}
	r, _ := idx.lookup(name)
	if r == nil {
		return nil, nil, notFound(name)
	}
	return s.image(idx, r), r, nil
}

// List returns every image in the store, ordered by first name.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	out := make([]*Image, 0, len(idx.Images))
	for _, r := range idx.Images {
		out = append(out, s.image(idx, r))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if len(a.Names) > 0 && len(b.Names) > 0 && a.Names[0] != b.Names[0] {
			return a.Names[0] < b.Names[0]
		}
		return a.ID < b.ID
	})
	return out, nil
}

func (s *Store) image(idx *indexFile, r *record) *Image {
	img := &Image{
		ID:       r.ID,
		Names:    idx.namesOf(r.ID),
		RootFS:   s.imageRootFS(r.ChainID),
		Config:   r.Config,
		Size:     r.Size,
		Created:  r.Created,
		ChainID:  r.ChainID,
		Manifest: s.blob(r.Manifest, string(types.OCIManifestSchema1), -1),
		// The config blob's size is its file's; the index does not keep it.
		ConfigBlob: s.blob(r.ID, string(types.OCIConfigJSON), -1),
	}
	for _, l := range r.Layers {
		img.Layers = append(img.Layers, Layer{Blob: s.blob(l.Digest, l.MediaType, l.Size), DiffID: l.DiffID})
	}
	return img
}

// blob describes the store's blob of digest; a size below zero is read
// from the file (zero when it is missing).
func (s *Store) blob(digest, mediaType string, size int64) Blob {
	b := Blob{Digest: digest, MediaType: mediaType, Size: size}
	if d, err := v1.NewHash(digest); err == nil {
		b.Path = s.blobPath(d)
	}
	if size < 0 {
		b.Size = 0
		if fi, err := os.Stat(b.Path); err == nil {
			b.Size = fi.Size()
		}
	}
	return b
}

// Tag gives the image that ref resolves to (as in Resolve) one more name. A
// name that pointed at another image moves.
func (s *Store) Tag(ctx context.Context, ref, name string) error {
	n, err := NormalizeName(name)
	if err != nil {
		return err
	}
	end, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer end()
	return s.updateIndex(ctx, func(idx *indexFile) error {
		r, _ := idx.lookup(ref)
		if r == nil {
			return notFound(ref)
		}
		idx.setNames(r.ID, []string{n})
		return nil
	})
}

// Remove removes a name. If name is an image id (or a unique prefix of one),
// the image loses all its names. Blobs and root filesystems no image needs
// any more are then deleted, now if no other operation is writing to the
// store, or else when the last such operation ends.
//
// Remove does not know about running sandboxes: callers that use an image's
// RootFS must keep it from being removed.
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.updateIndex(ctx, func(idx *indexFile) error {
		r, matched := idx.lookup(name)
		if r == nil {
			return notFound(name)
		}
		if matched != "" {
			idx.removeName(matched)
			return nil
		}
		for _, n := range idx.namesOf(r.ID) {
			delete(idx.Names, n)
		}
		delete(idx.Images, r.ID)
		return nil
	})
	if err != nil {
		return err
	}
	s.log.Info("image name removed", "op", "remove", "image", name)
	if _, err := s.collect(ctx, false); err != nil {
		s.log.Warn("garbage collection failed", "op", "remove", "err", err)
	}
	return nil
}

// Prune deletes every blob and root filesystem that no image needs, and what
// interrupted operations left behind. It waits (until ctx is done) for
// operations that are writing to the store to finish first.
func (s *Store) Prune(ctx context.Context) error {
	_, err := s.collect(ctx, true)
	return err
}

// beginWrite marks the start of an operation that adds blobs or root
// filesystems: garbage collection does not run until it ends. The returned
// function ends it and collects garbage if nothing else is writing.
func (s *Store) beginWrite(ctx context.Context) (end func(), err error) {
	l, err := lockFile(ctx, s.path("gc.lock"), false)
	if err != nil {
		return nil, err
	}
	return func() {
		l.release()
		// Collect what this or earlier operations (a Remove that ran while we
		// wrote) left; skipped if another writer is active.
		if _, err := s.collect(context.WithoutCancel(ctx), false); err != nil {
			s.log.Warn("garbage collection failed", "err", err)
		}
	}, nil
}

// unpackedMeta is written beside each root filesystem.
type unpackedMeta struct {
	ChainID  string    `json:"chainID"`
	Size     int64     `json:"size"`
	Unpacked time.Time `json:"unpacked"`
}

func (s *Store) readUnpackedMeta(chainID string) (*unpackedMeta, error) {
	b, err := os.ReadFile(filepath.Join(s.unpackedDir(chainID), "meta.json"))
	if err != nil {
		return nil, err
	}
	var m unpackedMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("root filesystem %s metadata: %w", shortID(chainID), err)
	}
	return &m, nil
}

// exists reports whether p exists; other errors count as "no".
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
