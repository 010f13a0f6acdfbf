package files

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// The operations a signature can grant: a GET is a read, a POST a write.
const (
	opRead  = "read"
	opWrite = "write"
)

// Signature returns the signature that authorizes operation ("read" or
// "write") on path as username, with the sandbox's access token:
//
//	"v1_" + base64-without-padding(sha256("<path>:<operation>:<username>:<token>[:<expiration>]"))
//
// path and username are exactly as they appear in the URL's query (username
// is empty when the URL names none). expiration is a Unix time in seconds;
// zero means the signature never expires and leaves it out of the hash. The
// E2B SDKs compute the same value for their signed upload and download URLs.
func Signature(path, operation, username, token string, expiration int64) string {
	parts := []string{path, operation, username, token}
	if expiration != 0 {
		parts = append(parts, strconv.FormatInt(expiration, 10))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// authorize checks r against the token Config.AccessToken holds now for
// op. Without a token
// every request passes. With one, the X-Access-Token header, when present,
// must match it; otherwise the query's signature must match Signature over
// the query's path and username, and its signature_expiration, when given,
// must not have passed. Failures are errdefs.ErrUnauthenticated. It
// reports whether the signature is what let r in: then the signed username
// alone says whom r acts as.
func (h *handler) authorize(r *http.Request, op string) (signed bool, err error) {
	token := h.cfg.AccessToken.Get()
	if token == "" {
		return false, nil
	}
	if got := r.Header.Get("X-Access-Token"); got != "" {
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return false, fmt.Errorf("X-Access-Token does not match: %w", errdefs.ErrUnauthenticated)
		}
		return false, nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return false, fmt.Errorf("missing X-Access-Token header or signature: %w", errdefs.ErrUnauthenticated)
	}
	var exp int64
	if s := q.Get("signature_expiration"); s != "" {
		var err error
		if exp, err = strconv.ParseInt(s, 10, 64); err != nil {
			return false, fmt.Errorf("signature_expiration %q is not a Unix time: %w", s, errdefs.ErrUnauthenticated)
		}
	}
	want := Signature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return false, fmt.Errorf("invalid signature for %s: %w", op, errdefs.ErrUnauthenticated)
	}
	if exp != 0 && exp < time.Now().Unix() {
		return false, fmt.Errorf("signature expired at %s: %w", time.Unix(exp, 0).UTC().Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	return true, nil
}
