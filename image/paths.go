package image

import (
	"fmt"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// errEscape is returned for a name that leads outside the root.
func errEscape(name string) error {
	return fmt.Errorf("path %q leads outside the image root: the layer is broken or malicious and was refused: %w", name, errdefs.ErrInvalidArgument)
}

// cleanPath turns a name from a tar header into a path relative to the root
// ("" for the root itself). A leading "/" is dropped, as tar does; ".." that
// would climb above the root is an error.
func cleanPath(name string) (string, error) {
	parts := make([]string, 0, strings.Count(name, "/")+1)
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", errEscape(name)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// splitPath splits a clean relative path into its directory ("" for the
// root) and last element.
func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func joinPath(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

// clampPath cleans a path the way a kernel resolves it inside a chroot: ".."
// at the root stays at the root. The result is relative ("" for the root).
func clampPath(p string) string {
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/")
}
