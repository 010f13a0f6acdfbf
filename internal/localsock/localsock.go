// Package localsock says where `tupper serve` keeps its local unix socket:
// the door that clients on the daemon's own host (the CLI, `tupper mcp`, the
// Go SDK) use with no API key, the kernel telling the daemon who connects.
//
// Every state root has its own socket, so that daemons on different roots
// never meet: the default root's is /run/tupper.sock, as Docker's is
// /run/docker.sock; any other root's is /run/tupper-<hash>.sock, <hash>
// being the first 16 hex digits of the SHA-256 of the root's absolute path.
// The socket is not kept inside the root itself because a root is usually
// readable by root alone (0700), which would shut out the members of the
// tupper group, and because a unix socket's path must fit in 108 bytes,
// which a long temporary root does not.
package localsock

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// Group is the group whose members the socket lets in besides root, as
// the docker group does for Docker's socket.
const Group = "tupper"

// EnvRoot is the environment variable that names the state root when no
// --root is given; it is `tupper serve`'s too.
const EnvRoot = "TUPPER_ROOT"

// scheme starts the API URL of a socket: unix:///run/tupper.sock.
const scheme = "unix://"

// HeaderPublicURL is the header with which the daemon tells a client on
// its socket its own TCP URL: where URLs meant for other clients (signed
// file URLs) must point, since a socket's requests name no address a
// browser or curl could open.
const HeaderPublicURL = "Tupper-Url"

// URL returns the API URL that names the socket at path.
func URL(path string) string { return scheme + path }

// FromURL returns the socket path that rawURL names, and false when it is
// not a unix:// URL of an absolute path.
func FromURL(rawURL string) (string, bool) {
	p, ok := strings.CutPrefix(rawURL, scheme)
	if !ok || !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
		return "", false
	}
	return filepath.Clean(p), true
}

// Of returns the socket of state root root: an empty root means
// $TUPPER_ROOT, else DefaultRoot. It returns "" on systems where `tupper
// serve` has no local socket.
func Of(root string) string {
	if root == "" {
		root = os.Getenv(EnvRoot)
	}
	if root == "" {
		root = DefaultRoot
	}
	return pathOf(root)
}

// Exists reports whether a socket sits at path. It says nothing of whether
// a daemon listens on it, or whether the caller may connect.
func Exists(path string) bool {
	if path == "" {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && st.Mode().Type() == os.ModeSocket
}

// hashedPath is the socket of a root other than the default one, in dir.
func hashedPath(dir, root string) string {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join(dir, "tupper-"+hex.EncodeToString(sum[:8])+".sock")
}
