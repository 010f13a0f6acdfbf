// Package image is Tupper's image store: it pulls images from registries,
// imports `docker save` and OCI-layout tarballs, builds Debian images with
// mmdebstrap, and unpacks each image once into a root filesystem that every
// sandbox shares read-only.
//
// # On disk
//
//	<root>/index.json             names → image ids, and what is known of each image
//	<root>/index.lock             flock: one writer of index.json at a time
//	<root>/gc.lock                flock: writers hold it shared, garbage collection exclusive
//	<root>/blobs/sha256/<hex>     manifests, configs and layers, read-only, named by digest
//	<root>/unpacked/<hex>/rootfs  a root filesystem, named by the chain id of its layers
//	<root>/unpacked/<hex>/meta.json
//	<root>/locks/                 flocks that make concurrent pulls fetch and unpack once
//	<root>/tmp/                   work in progress; emptied by garbage collection
//
// Everything appears by rename only when complete: index.json is replaced
// atomically, blobs are checked against their digest first, and a root
// filesystem is unpacked in tmp/ and flushed before it moves to unpacked/.
// Several processes may share one root.
//
// # Ownership
//
// A root filesystem (Image.RootFS) belongs to the store. Sandboxes must get a
// copy-on-write view of it (overlayfs, or the runtime's own); nothing may
// write to it. The store keeps its root private (0700), because images carry
// set-user-ID programs.
//
// Unpacking needs Linux 5.6 or newer (openat2) and, to keep file ownership,
// root.
package image
