package backend

// Image is the image a sandbox boots from, as the image store keeps it: its
// blobs (manifest, config and layers, each a file on the host) and what its
// config says about running it. A backend that runs a directory tree uses
// Spec.RootFS and may ignore it; a backend that needs the image in another
// form makes that form from it and caches it by ChainID: a VM backend a disk
// image, the Apple backend an OCI archive for `container image load`.
//
// Every path is the store's own file: it must never be written, and it stays
// while the sandbox holds its lease on the image.
type Image struct {
	// ID is the digest of the image's config ("sha256:…").
	ID string
	// Names are the image's names in the store, for logs and for the
	// name under which a backend with a store of its own keeps it.
	Names []string
	// ChainID names the stack of layers: images with equal stacks share
	// it, and the unpacked RootFS is the same for them.
	ChainID string
	// Manifest is the OCI image manifest; Config the OCI image config.
	Manifest Blob
	Config   Blob
	// Layers are the layer blobs, lowest first.
	Layers []Layer
	// Env, User, WorkingDir and Labels are from the image's config.
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
}

// Blob is one content-addressed file of an image.
type Blob struct {
	// Digest is "sha256:…" of the file's bytes.
	Digest string
	// MediaType is its OCI media type.
	MediaType string
	// Size is its length in bytes.
	Size int64
	// Path is the file on the host.
	Path string
}

// Layer is a layer blob and the digest of its uncompressed content.
type Layer struct {
	Blob
	DiffID string
}
