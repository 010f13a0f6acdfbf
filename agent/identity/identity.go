// Package identity resolves the user a request to the agent acts as, and the
// paths it names, the way envd does: an `Authorization: Basic
// base64("<user>:")` header or a `username` query parameter picks the user,
// the agent's default user applies otherwise, and relative paths resolve
// against that user's home directory.
package identity

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os/user"
	"path"
	"strconv"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// DefaultUser is the unprivileged account E2B images carry and commands run
// as unless a request names another.
const DefaultUser = "user"

// User is a resolved account inside the sandbox.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Home   string
	Shell  string
}

// Lookup resolves an account by name from the sandbox's /etc/passwd and
// /etc/group. An unknown name fails with errdefs.ErrUnauthenticated, since
// a request naming a missing user is refused as envd refuses it.
func Lookup(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w: no such user in this sandbox", name, errdefs.ErrUnauthenticated)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: bad uid %q", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: bad gid %q", name, u.Gid)
	}
	res := &User{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir, Shell: shellOf(name)}
	if res.Home == "" {
		res.Home = "/"
	}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				res.Groups = append(res.Groups, uint32(g))
			}
		}
	}
	return res, nil
}

// FromRequest returns the user a request acts as: the Basic authorization
// header's user name, else the username query parameter, else def.
func FromRequest(r *http.Request, def string) (*User, error) {
	name, err := nameFromHeader(r.Header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = r.URL.Query().Get("username")
	}
	if name == "" {
		name = def
	}
	return Lookup(name)
}

func nameFromHeader(h string) (string, error) {
	if h == "" {
		return "", nil
	}
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("authorization header: %w: want Basic base64(\"<user>:\")", errdefs.ErrUnauthenticated)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", fmt.Errorf("authorization header: %w: not base64", errdefs.ErrUnauthenticated)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// ResolvePath turns p into an absolute, clean path: "~" and "~/x" expand to
// the user's home, and a relative path is taken relative to the home. An
// empty path is an error wrapping errdefs.ErrInvalidArgument.
func (u *User) ResolvePath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("path is empty: %w", errdefs.ErrInvalidArgument)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	}
	switch {
	case p == "~":
		p = u.Home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(u.Home, p[2:])
	case !path.IsAbs(p):
		p = path.Join(u.Home, p)
	}
	return path.Clean(p), nil
}
