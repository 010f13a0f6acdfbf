package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
)

// A build runs its steps one after another in one sandbox, and after each
// takes the sandbox's changes so far (backend.Exporter): a cumulative
// layer. The layer of step i is what its cumulative layer holds that the
// one before did not, or holds differently, and a whiteout for what it
// held and no longer does. So each step gets a layer of its own without a
// sandbox of its own.

// entrySig is what tells two versions of one path apart.
type entrySig struct {
	typ      byte
	mode     int64
	uid, gid int
	size     int64
	link     string
	sum      [sha256.Size]byte
	xattrs   string
	// modTime counts for files only: a directory's changes with what is in
	// it, which its own entries say.
	modTime int64
}

func sigOf(hdr *tar.Header, sum [sha256.Size]byte) entrySig {
	s := entrySig{typ: hdr.Typeflag, mode: hdr.Mode, uid: hdr.Uid, gid: hdr.Gid, size: hdr.Size, link: hdr.Linkname, sum: sum}
	if hdr.Typeflag != tar.TypeDir {
		s.modTime = hdr.ModTime.Unix()
	}
	var xs []string
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			xs = append(xs, k+"="+v)
		}
	}
	slices.Sort(xs)
	s.xattrs = strings.Join(xs, "\x00")
	return s
}

// indexLayer reads the cumulative layer at p: each path's signature.
func indexLayer(p string) (map[string]entrySig, error) {
	out := map[string]entrySig{}
	if p == "" {
		return out, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, tr); err != nil {
			return nil, err
		}
		out[cleanName(hdr.Name)] = sigOf(hdr, [sha256.Size]byte(h.Sum(nil)))
	}
}

func cleanName(n string) string { return strings.TrimSuffix(path.Clean("/"+n), "/")[1:] }

// diffLayers writes to w the layer that takes a tree from the cumulative
// layer prev ("" for none) to cur: the entries of cur that prev lacks or
// holds otherwise (with the directories above them), and a whiteout for
// each topmost path of prev that cur lacks.
func diffLayers(prev, cur string, w io.Writer) error {
	before, err := indexLayer(prev)
	if err != nil {
		return err
	}
	f, err := os.Open(cur)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	tw := tar.NewWriter(w)
	seen := map[string]bool{}
	dirs := map[string]*tar.Header{} // the directories of cur, for the parents of what is written
	written := map[string]bool{}
	var writeParents func(name string) error
	writeParents = func(name string) error {
		parent := path.Dir(name)
		if parent == "." || written[parent] {
			return nil
		}
		if err := writeParents(parent); err != nil {
			return err
		}
		if hdr, ok := dirs[parent]; ok {
			written[parent] = true
			h := *hdr
			return tw.WriteHeader(&h)
		}
		return nil
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", cur, err)
		}
		name := cleanName(hdr.Name)
		seen[name] = true
		if hdr.Typeflag == tar.TypeDir {
			h := *hdr
			dirs[name] = &h
		}
		// The content is read twice (to compare, then to copy): spool it.
		body, sum, err := spool(tr, hdr.Size)
		if err != nil {
			return err
		}
		old, had := before[name]
		// A whiteout (an opaque directory's above all) acts when its
		// layer is applied: once there, it must not come again, or it
		// would hide what the steps between put in.
		if had && (old == sigOf(hdr, sum) || strings.HasPrefix(path.Base(name), ".wh.")) {
			body.close()
			continue
		}
		err = func() error {
			defer body.close()
			if err := writeParents(name); err != nil {
				return err
			}
			if written[name] {
				return nil
			}
			written[name] = true
			h := *hdr
			if err := tw.WriteHeader(&h); err != nil {
				return err
			}
			_, err := io.Copy(tw, body.reader())
			return err
		}()
		if err != nil {
			return err
		}
	}
	// What went: a whiteout for each topmost path (whiteouts of prev that
	// went mean the file came back, which cur holds).
	var gone []string
	for _, name := range slices.Sorted(maps.Keys(before)) {
		if seen[name] || strings.HasPrefix(path.Base(name), ".wh.") {
			continue
		}
		if len(gone) > 0 && strings.HasPrefix(name, gone[len(gone)-1]+"/") {
			continue
		}
		gone = append(gone, name)
	}
	for _, name := range gone {
		if err := writeParents(name); err != nil {
			return err
		}
		wh := tar.Header{Typeflag: tar.TypeReg, Name: path.Join(path.Dir(name), ".wh."+path.Base(name)), Mode: 0o644, Format: tar.FormatPAX}
		if err := tw.WriteHeader(&wh); err != nil {
			return err
		}
	}
	return tw.Close()
}

// spooled is an entry's content, read ahead: in memory when small, in a
// temporary file when not.
type spooled struct {
	mem  []byte
	file *os.File
}

func (s *spooled) reader() io.Reader {
	if s.file != nil {
		return s.file
	}
	return bytes.NewReader(s.mem)
}

func (s *spooled) close() {
	if s.file != nil {
		s.file.Close()
		os.Remove(s.file.Name())
	}
}

// maxInMemory is the largest content spooled in memory.
const maxInMemory = 1 << 20

// spool reads the n bytes of an entry's content ahead, and returns them
// with their digest.
func spool(r io.Reader, n int64) (*spooled, [sha256.Size]byte, error) {
	h := sha256.New()
	if n <= maxInMemory {
		b, err := io.ReadAll(io.TeeReader(r, h))
		return &spooled{mem: b}, [sha256.Size]byte(h.Sum(nil)), err
	}
	f, err := os.CreateTemp("", "tupper-layer-")
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	sp := &spooled{file: f}
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		sp.close()
		return nil, [sha256.Size]byte{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		sp.close()
		return nil, [sha256.Size]byte{}, err
	}
	return sp, [sha256.Size]byte(h.Sum(nil)), nil
}
