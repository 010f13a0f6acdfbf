package apple

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/lightbearco/tupper/backend"
)

// imageLoader puts sandboxes' images into `container`'s store.
type imageLoader struct {
	cli  *cli
	tmp  string // where archives are written, and removed after loading
	arch string // the platform of images made from a RootFS alone

	mu     sync.Mutex
	loaded map[string]bool // names known to be in the store
	// loadMu serializes loads: they are rare, big and write the same
	// store.
	loadMu sync.Mutex
}

// ensure makes sure `container`'s store holds spec's image and returns the
// name to run it by.
func (l *imageLoader) ensure(ctx context.Context, spec *backend.Spec) (string, error) {
	ref, err := imageRef(spec)
	if err != nil {
		return "", err
	}
	if l.isLoaded(ref) {
		return ref, nil
	}
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	if l.isLoaded(ref) {
		return ref, nil
	}
	out, err := l.cli.run(ctx, "image", "list", "--format", "json")
	if err != nil {
		return "", fmt.Errorf("list `container`'s images: %w", err)
	}
	if listed, err := imageListed(out, ref); err != nil {
		return "", err
	} else if listed {
		l.markLoaded(ref)
		return ref, nil
	}

	f, err := os.CreateTemp(l.tmp, "image-*.tar")
	if err != nil {
		return "", fmt.Errorf("image archive: %w", err)
	}
	defer os.Remove(f.Name())
	if spec.Image != nil {
		err = writeImageArchive(f, spec.Image, ref)
	} else {
		err = writeRootFSArchive(f, spec.RootFS, l.arch, ref, l.tmp)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write the OCI archive of image %s: %w", ref, err)
	}
	if _, err := l.cli.run(ctx, "image", "load", "--input", f.Name()); err != nil {
		return "", fmt.Errorf("load image %s into `container`'s store: %w", ref, err)
	}
	l.markLoaded(ref)
	return ref, nil
}

func (l *imageLoader) isLoaded(ref string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loaded[ref]
}

func (l *imageLoader) markLoaded(ref string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loaded[ref] = true
}

// imageRefRepo is the registry part of every name the backend gives an
// image; nothing is ever pulled from it.
const imageRefRepo = "tupper.local/"

// imageRef is the name under which spec's image goes into `container`'s
// store: tupper.local/<the image's name>:<its digest>. An Image is named by
// its config digest (Image.ID), which changes with any of its layers or
// settings. A RootFS alone is named by its path and its root's
// modification time: the image store never changes an unpacked root, and
// a test that rebuilds one gets a new time.
func imageRef(spec *backend.Spec) (string, error) {
	if img := spec.Image; img != nil {
		_, hexID, ok := strings.Cut(img.ID, ":")
		if !ok || len(hexID) < 16 {
			return "", fmt.Errorf("image %v has no config digest (Image.ID %q)", img.Names, img.ID)
		}
		name := "image"
		if len(img.Names) > 0 {
			name = repoPart(img.Names[0])
		}
		return imageRefRepo + name + ":" + hexID[:16], nil
	}
	root, err := filepath.Abs(spec.RootFS)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("the sandbox's root: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("the sandbox's root %s is not a directory", root)
	}
	sum := sha256.Sum256([]byte(root + "\x00" + st.ModTime().UTC().String()))
	return imageRefRepo + "rootfs:" + hex.EncodeToString(sum[:])[:16], nil
}

var notRepoChars = regexp.MustCompile(`[^a-z0-9]+`)

// repoPart makes a repository path component of an image's name: its
// last path element without tag or digest, lower case, with every run of
// other characters than letters and digits turned into one dash.
func repoPart(name string) string {
	name, _, _ = strings.Cut(name, "@")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, ":")
	name = strings.Trim(notRepoChars.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if name == "" {
		return "image"
	}
	return name
}
