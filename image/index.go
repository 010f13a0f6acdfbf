package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/lightbearco/tupper/internal/atomicfile"
)

// indexVersion is the version of index.json this code writes and reads.
const indexVersion = 1

// indexFile is the content of index.json: which names point at which image,
// and what the store knows about each image. It is read without a lock (it is
// only ever replaced by a rename, so a reader sees a whole file) and changed
// only under index.lock.
type indexFile struct {
	Version int                `json:"version"`
	Names   map[string]string  `json:"names"`  // normalized name → image id
	Images  map[string]*record `json:"images"` // image id → record
}

// record is one image as the index keeps it.
type record struct {
	ID       string        `json:"id"`       // digest of the config blob
	Manifest string        `json:"manifest"` // digest of the OCI manifest blob the store wrote
	ChainID  string        `json:"chainID"`  // names the unpacked root filesystem
	Layers   []layerRecord `json:"layers"`
	Config   ImageConfig   `json:"config"`
	Size     int64         `json:"size"` // bytes of the unpacked root filesystem
	Created  time.Time     `json:"created"`
	Source   string        `json:"source,omitempty"` // where it came from, for people
}

// layerRecord is one layer blob of an image.
type layerRecord struct {
	Digest    string `json:"digest"`
	DiffID    string `json:"diffID"`
	MediaType string `json:"mediaType"`
	Size      int64  `json:"size"`
}

func newIndex() *indexFile {
	return &indexFile{Version: indexVersion, Names: map[string]string{}, Images: map[string]*record{}}
}

// readIndex reads index.json; a store without one is empty.
func (s *Store) readIndex() (*indexFile, error) {
	b, err := os.ReadFile(s.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return newIndex(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read image index: %w", err)
	}
	idx := newIndex()
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("image index %s is corrupt (%v): move it away and pull or build the images again", s.indexPath(), err)
	}
	if idx.Version > indexVersion {
		return nil, fmt.Errorf("image index %s has version %d, newer than this tupper understands (%d): upgrade tupper", s.indexPath(), idx.Version, indexVersion)
	}
	if idx.Names == nil {
		idx.Names = map[string]string{}
	}
	if idx.Images == nil {
		idx.Images = map[string]*record{}
	}
	return idx, nil
}

// updateIndex runs fn on the current index under index.lock and writes the
// result atomically. fn's error aborts the update.
func (s *Store) updateIndex(ctx context.Context, fn func(*indexFile) error) error {
	l, err := lockFile(ctx, s.path("index.lock"), true)
	if err != nil {
		return err
	}
	defer l.release()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := fn(idx); err != nil {
		return err
	}
	b, err := json.MarshalIndent(idx, "", "\t")
	if err != nil {
		return fmt.Errorf("encode image index: %w", err)
	}
	if err := atomicfile.Write(s.indexPath(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write image index: %w", err)
	}
	return nil
}

// setNames points each name at the image id, taking it from whatever image
// had it before; images left without names are dropped from the index (their
// files go at the next garbage collection).
func (idx *indexFile) setNames(id string, names []string) {
	for _, n := range names {
		old, ok := idx.Names[n]
		idx.Names[n] = id
		if ok && old != id {
			idx.dropIfUnnamed(old)
		}
	}
}

// removeName drops one name and, if that was its image's last, the image.
func (idx *indexFile) removeName(n string) {
	id, ok := idx.Names[n]
	if !ok {
		return
	}
	delete(idx.Names, n)
	idx.dropIfUnnamed(id)
}

func (idx *indexFile) dropIfUnnamed(id string) {
	for _, other := range idx.Names {
		if other == id {
			return
		}
	}
	delete(idx.Images, id)
}

// namesOf returns the sorted names of an image.
func (idx *indexFile) namesOf(id string) []string {
	var out []string
	for n, other := range idx.Names {
		if other == id {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// lookup finds the image a user's string means: a name as kept, any spelling
// of it, a full image id, or a unique prefix of one. It returns the record and
// the name it matched ("" for an id).
func (idx *indexFile) lookup(q string) (*record, string) {
	if id, ok := idx.Names[q]; ok {
		return idx.Images[id], q
	}
	if n, err := NormalizeName(q); err == nil {
		if id, ok := idx.Names[n]; ok {
			return idx.Images[id], n
		}
	}
	prefix := ""
	switch {
	case strings.HasPrefix(q, idPrefix) && isHex(q[len(idPrefix):]):
		prefix = q
	case len(q) >= minIDPrefix && isHex(q):
		prefix = idPrefix + q
	default:
		return nil, ""
	}
	var found *record
	for id, r := range idx.Images {
		if strings.HasPrefix(id, prefix) {
			if found != nil {
				return nil, "" // ambiguous
			}
			found = r
		}
	}
	return found, ""
}
