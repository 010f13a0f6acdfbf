package sdk

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// URLOptions configures Sandbox.DownloadURL and Sandbox.UploadURL.
type URLOptions struct {
	// User is the user the file is read or written as; empty means the
	// sandbox's default user.
	User string
	// Expires makes a signed URL stop working after this long; zero means
	// it does not expire. It needs a sandbox with an access token.
	Expires time.Duration
}

// DownloadURL returns a URL that GETs the file at path with no other
// credentials: when the sandbox has an access token, the URL carries a
// signature made from it.
func (s *Sandbox) DownloadURL(path string, opts URLOptions) (string, error) {
	return s.fileURL(path, "read", opts, time.Now())
}

// UploadURL returns a URL that accepts a POST of the file at path (a
// multipart/form-data or application/octet-stream body), signed like
// DownloadURL.
func (s *Sandbox) UploadURL(path string, opts URLOptions) (string, error) {
	return s.fileURL(path, "write", opts, time.Now())
}

func (s *Sandbox) fileURL(path, op string, opts URLOptions, now time.Time) (string, error) {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if opts.User != "" {
		q.Set("username", opts.User)
	}
	if s.conn.token == "" {
		if opts.Expires != 0 {
			return "", fmt.Errorf("%s URL of %q: %w: expiring URLs need a sandbox with an access token", op, path, errdefs.ErrInvalidArgument)
		}
		return s.conn.publicFilesURL(q), nil
	}
	var expiration int64
	if opts.Expires > 0 {
		expiration = now.Add(opts.Expires).Unix()
		q.Set("signature_expiration", strconv.FormatInt(expiration, 10))
	}
	q.Set("signature", fileSignature(path, op, opts.User, s.conn.token, expiration))
	return s.conn.publicFilesURL(q), nil
}

// fileSignature signs a /files URL as envd checks it:
// "v1_" + unpadded base64 of sha256("<path>:<op>:<user>:<token>[:<expiration>]").
func fileSignature(path, op, user, token string, expiration int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}
