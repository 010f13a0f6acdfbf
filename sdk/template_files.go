package sdk

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// The files of a COPY step travel as a gzipped tar of their paths relative
// to the template's context directory, named by a hash of the files and
// the step, as E2B's SDK makes both: the server keeps each archive once,
// and a build whose files have not changed uploads nothing.

// copyEntry is a file, directory or link a COPY step takes.
type copyEntry struct {
	rel  string // slash-separated, relative to the context directory
	info fs.FileInfo
	link string // a symbolic link's target
}

// copySource lists what src (a path or a glob pattern relative to the
// context) takes: each match, and everything under a matched directory,
// without following links, less what ignore leaves out; sorted by path.
// Nothing outside the context is reached, links included.
func copySource(root *os.Root, src string, ignore *ignoreMatcher) ([]copyEntry, error) {
	pattern := path.Clean(filepath.ToSlash(src))
	var matches []string
	if strings.ContainsAny(pattern, `*?[\`) {
		var err error
		if matches, err = fs.Glob(root.FS(), pattern); err != nil {
			return nil, fmt.Errorf("COPY %s: %w: %w", src, err, errdefs.ErrInvalidArgument)
		}
	} else if _, err := root.Lstat(pattern); err == nil {
		// Not fs.Glob, which follows a link named in full.
		matches = []string{pattern}
	}
	seen := map[string]bool{}
	var out []copyEntry
	add := func(rel string) error {
		if seen[rel] || ignore.ignored(rel) {
			return nil
		}
		seen[rel] = true
		fi, err := root.Lstat(rel)
		if err != nil {
			return err
		}
		e := copyEntry{rel: rel, info: fi}
		if fi.Mode().Type() == fs.ModeSymlink {
			if e.link, err = root.Readlink(rel); err != nil {
				return err
			}
		}
		out = append(out, e)
		return nil
	}
	for _, m := range matches {
		fi, err := root.Lstat(m)
		if err != nil {
			return nil, fmt.Errorf("COPY %s: %w", src, err)
		}
		if !fi.IsDir() {
			if err := add(m); err != nil {
				return nil, fmt.Errorf("COPY %s: %w", src, err)
			}
			continue
		}
		err = fs.WalkDir(root.FS(), m, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == "." {
				// The context itself: its contents, not an entry.
				return nil
			}
			if d.IsDir() && p != m && ignore.ignored(p) && !ignore.mayReinclude(p) {
				return fs.SkipDir
			}
			return add(p)
		})
		if err != nil {
			return nil, fmt.Errorf("COPY %s: %w", src, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("COPY %s: no files found in the context directory: %w", src, errdefs.ErrInvalidArgument)
	}
	slices.SortFunc(out, func(a, b copyEntry) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

// filesHash is the hash that names the archive of a COPY of src to dest,
// as E2B's calculateFilesHash computes it: the step, then each entry's
// path, st_mode and size in decimal, and a file's content or a link's
// target. Owners and times are left out, so that the hash is the same on
// every machine.
func filesHash(root *os.Root, src, dest string, entries []copyEntry) (string, error) {
	h := sha256.New()
	io.WriteString(h, "COPY "+src+" "+dest)
	for _, e := range entries {
		io.WriteString(h, e.rel)
		io.WriteString(h, strconv.FormatUint(uint64(unixMode(e.info.Mode())), 10))
		io.WriteString(h, strconv.FormatInt(e.info.Size(), 10))
		switch {
		case e.info.Mode().Type() == fs.ModeSymlink:
			io.WriteString(h, e.link)
		case e.info.Mode().IsRegular():
			f, err := root.Open(e.rel)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeArchive writes entries as a gzipped tar to w: directories, files
// and links under their relative paths, with their modes and times and no
// owners (the build gives them the step's).
func writeArchive(w io.Writer, root *os.Root, entries []copyEntry) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		t := e.info.Mode().Type()
		if t != 0 && t != fs.ModeDir && t != fs.ModeSymlink {
			return fmt.Errorf("COPY: %s is neither a file, a directory nor a link: %w", e.rel, errdefs.ErrInvalidArgument)
		}
		hdr, err := tar.FileInfoHeader(e.info, e.link)
		if err != nil {
			return err
		}
		hdr.Name = e.rel
		if t == fs.ModeDir {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if t != 0 {
			continue
		}
		f, err := root.Open(e.rel)
		if err != nil {
			return err
		}
		// A file that grew since its header was written must not spill
		// into the next entry.
		_, err = io.Copy(tw, io.LimitReader(f, hdr.Size))
		f.Close()
		if err != nil {
			return fmt.Errorf("COPY: %s: %w", e.rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// spoolArchive writes the archive of entries to a temporary file, so that
// its upload carries its length, and returns it open at its start; the
// file is gone once it is closed.
func spoolArchive(root *os.Root, entries []copyEntry) (*spooled, error) {
	f, err := os.CreateTemp("", "tupper-template-*.tar.gz")
	if err != nil {
		return nil, err
	}
	s := &spooled{File: f}
	bw := bufio.NewWriter(f)
	err = writeArchive(bw, root, entries)
	if err == nil {
		err = bw.Flush()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.size = size
	return s, nil
}

// spooled is an archive in a temporary file, removed when closed.
type spooled struct {
	*os.File
	size int64
}

func (s *spooled) Close() error {
	return errors.Join(s.File.Close(), os.Remove(s.File.Name()))
}

// ignoreMatcher leaves paths out by .dockerignore patterns: a path is left
// out when the last pattern that matches it or one of its parent
// directories is not a "!" exception.
type ignoreMatcher struct {
	rules []ignoreRule
}

type ignoreRule struct {
	re      *regexp.Regexp
	exclude bool
	// pattern is the cleaned pattern, for mayReinclude.
	pattern string
}

// newIgnoreMatcher compiles patterns, as .dockerignore holds them: "#"
// comments and blank lines are skipped, "*" and "?" match within one path
// element, "**" across any number of them, and a leading "!" makes an
// exception.
func newIgnoreMatcher(patterns []string) (*ignoreMatcher, error) {
	m := &ignoreMatcher{}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		exclude := true
		if strings.HasPrefix(p, "!") {
			exclude, p = false, strings.TrimSpace(p[1:])
		}
		p = strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(p)), "/")
		if p == "" {
			continue
		}
		re, err := globRegexp(p)
		if err != nil {
			return nil, fmt.Errorf("ignore pattern %q: %w: %w", p, err, errdefs.ErrInvalidArgument)
		}
		m.rules = append(m.rules, ignoreRule{re: re, exclude: exclude, pattern: p})
	}
	return m, nil
}

// readIgnoreFile returns the patterns of dir's .dockerignore, if any.
func readIgnoreFile(root *os.Root) ([]string, error) {
	data, err := root.ReadFile(".dockerignore")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(string(data), "\n"), nil
}

// ignored reports whether rel (slash-separated, relative to the context)
// is left out.
func (m *ignoreMatcher) ignored(rel string) bool {
	if m == nil {
		return false
	}
	out := false
	for _, r := range m.rules {
		if r.matches(rel) {
			out = r.exclude
		}
	}
	return out
}

// matches reports whether the rule matches rel or a directory above it.
func (r ignoreRule) matches(rel string) bool {
	for p := rel; ; {
		if r.re.MatchString(p) {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// mayReinclude reports whether an exception may bring back something under
// the ignored directory dir, so that it must be walked all the same.
func (m *ignoreMatcher) mayReinclude(dir string) bool {
	for _, r := range m.rules {
		if !r.exclude && (strings.HasPrefix(r.pattern, dir+"/") || strings.Contains(r.pattern, "*") || strings.Contains(r.pattern, "?")) {
			return true
		}
	}
	return false
}

// globRegexp turns a .dockerignore pattern into a regular expression that
// matches whole slash-separated paths.
func globRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			i++
			if i+1 < len(p) && p[i+1] == '/' {
				// "**/" matches no directory or any number of them.
				i++
				b.WriteString("(?:.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, errors.New("unterminated [")
			}
			class := p[i+1 : i+j]
			if strings.HasPrefix(class, "^") || strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
