package identity

import "net/http"

// FromHeader returns the user a request acts as when only its headers are at
// hand, as in a Connect handler: the Basic authorization header's user name,
// else def. A malformed header fails with errdefs.ErrUnauthenticated, and so
// does a name with no account in the sandbox.
func FromHeader(h http.Header, def string) (*User, error) {
	name, err := nameFromHeader(h.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = def
	}
	return Lookup(name)
}
