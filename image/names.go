package image

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/lightbearco/tupper/errdefs"
)

// idPrefix starts every image id and every blob digest the store knows.
const idPrefix = "sha256:"

// minIDPrefix is the shortest bare hex prefix of an id that Resolve accepts,
// so that short names made of hex digits are never mistaken for ids.
const minIDPrefix = 12

// NormalizeName returns the form in which the store keeps a name, so that
// every spelling of one reference finds the same image: "alpine:3",
// "docker.io/library/alpine:3" and "index.docker.io/library/alpine:3" are all
// kept as "alpine:3", and "base:latest" as "base". Names on other registries
// keep their registry: "localhost:5000/x:y". An invalid name is an error of
// class errdefs.ErrInvalidArgument.
func NormalizeName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty image name: give a name such as base or docker.io/library/alpine:3: %w", errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(s, idPrefix) {
		return "", fmt.Errorf("invalid image name %q: names may not start with %q, which marks image ids: %w", s, idPrefix, errdefs.ErrInvalidArgument)
	}
	ref, err := name.ParseReference(s)
	if err != nil {
		return "", fmt.Errorf("invalid image name %q (%v): use lowercase letters, digits, '.', '_', '-' and '/', optionally followed by :tag, as in base or docker.io/library/alpine:3: %w",
			s, err, errdefs.ErrInvalidArgument)
	}
	return familiarName(ref), nil
}

// familiarName renders ref the way people write it: Docker Hub's registry and
// "library/" namespace and the "latest" tag are left out.
func familiarName(ref name.Reference) string {
	repo := ref.Context()
	var b strings.Builder
	if reg := repo.RegistryStr(); reg == name.DefaultRegistry || reg == "docker.io" {
		b.WriteString(strings.TrimPrefix(repo.RepositoryStr(), "library/"))
	} else {
		b.WriteString(reg)
		b.WriteByte('/')
		b.WriteString(repo.RepositoryStr())
	}
	switch r := ref.(type) {
	case name.Tag:
		if t := r.TagStr(); t != name.DefaultTag {
			b.WriteByte(':')
			b.WriteString(t)
		}
	case name.Digest:
		b.WriteByte('@')
		b.WriteString(r.DigestStr())
	}
	return b.String()
}

// normalizeNames normalizes each name and drops duplicates, keeping order.
func normalizeNames(names []string) ([]string, error) {
	out := make([]string, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		nn, err := NormalizeName(n)
		if err != nil {
			return nil, err
		}
		if !seen[nn] {
			seen[nn] = true
			out = append(out, nn)
		}
	}
	return out, nil
}

// isHex reports whether s is made only of lowercase hex digits.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// shortID returns the first 12 hex digits of a digest, for messages.
func shortID(d string) string {
	h := strings.TrimPrefix(d, idPrefix)
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
