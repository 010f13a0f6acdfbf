// Package accesstoken holds a sandbox's access token: the secret every
// request to the agent carries in X-Access-Token, and from which signed
// /files URLs are made. The agent's /init replaces it after a restore
// (a fork must not share its source's token) while requests are being
// checked, so every check reads it from one Token rather than keeping a
// copy.
package accesstoken

import (
	"crypto/subtle"
	"fmt"
	"sync/atomic"

	"github.com/lightbearco/tupper/errdefs"
)

// Bounds on the length of a token that may replace another (Check).
const (
	MinLen = 16
	MaxLen = 512
)

// Token holds an access token. Its methods are safe for concurrent use.
// A Token holding "" holds none, and so does a nil *Token: then nothing
// is guarded.
type Token struct {
	v atomic.Pointer[string]
}

// New returns a Token holding s ("" for none).
func New(s string) *Token {
	t := &Token{}
	t.Set(s)
	return t
}

// Get returns the token, or "" when t holds none.
func (t *Token) Get() string {
	if t == nil {
		return ""
	}
	if p := t.v.Load(); p != nil {
		return *p
	}
	return ""
}

// Set replaces the token. Every check that starts after Set returns sees
// s; a check already running may still see the old token.
func (t *Token) Set(s string) { t.v.Store(&s) }

// Opens reports whether got opens what t guards: anything does when t
// holds no token, else only the token itself (compared in constant time).
func (t *Token) Opens(got string) bool {
	want := t.Get()
	return want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Check returns nil when s may replace a token, and an
// errdefs.ErrInvalidArgument saying why not otherwise: s must be MinLen to
// MaxLen bytes of printable ASCII without spaces, so that it travels
// unchanged in an HTTP header (whose value loses surrounding spaces) and in
// a URL's signature. The error never holds s itself.
func Check(s string) error {
	if len(s) < MinLen || len(s) > MaxLen {
		return fmt.Errorf("access token: %d bytes, want %d to %d: %w", len(s), MinLen, MaxLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("access token: byte %d is %#x, want printable ASCII without spaces: %w", i, c, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
