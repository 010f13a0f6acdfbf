package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

// Signed /files URLs (shared/specs/e2b-wire.md §4) carry no headers: the
// server finds their sandbox by recomputing the signature with each running
// sandbox's access token.

// signedFiles is a parsed signed /files URL.
type signedFiles struct {
	Path       string
	User       string
	Op         string // "read" or "write"
	Signature  string
	Expiration int64 // Unix seconds; 0 means none
}

// parseSignedFiles reads the signature fields of a /files request. The
// method decides the operation: GET (and HEAD) read, POST writes.
func parseSignedFiles(method string, q url.Values) (*signedFiles, error) {
	sf := &signedFiles{Path: q.Get("path"), User: q.Get("username"), Signature: q.Get("signature")}
	switch method {
	case http.MethodGet, http.MethodHead:
		sf.Op = "read"
	case http.MethodPost:
		sf.Op = "write"
	default:
		return nil, fmt.Errorf("method %s is not allowed on /files: %w", method, errdefs.ErrInvalidArgument)
	}
	if !strings.HasPrefix(sf.Signature, "v1_") {
		return nil, fmt.Errorf("signature is not a v1 signature: %w", errdefs.ErrUnauthenticated)
	}
	if s := q.Get("signature_expiration"); s != "" {
		exp, err := strconv.ParseInt(s, 10, 64)
		if err != nil || exp <= 0 {
			return nil, fmt.Errorf("signature_expiration %q is not a Unix time: %w", s, errdefs.ErrUnauthenticated)
		}
		sf.Expiration = exp
	}
	return sf, nil
}

// fileSignature computes what the SDKs sign a /files URL with:
// "v1_" + unpadded base64 of sha256("<path>:<op>:<user>:<token>[:<expiration>]").
func fileSignature(path, op, user, token string, expiration int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// signedBy reports whether sf was signed with token.
func (sf *signedFiles) signedBy(token string) bool {
	want := fileSignature(sf.Path, sf.Op, sf.User, token, sf.Expiration)
	return subtle.ConstantTimeCompare([]byte(sf.Signature), []byte(want)) == 1
}

// expired reports whether sf's expiration has passed at now.
func (sf *signedFiles) expired(now time.Time) bool {
	return sf.Expiration != 0 && sf.Expiration < now.Unix()
}

// tokenIndex maps running sandboxes to their access tokens, for finding the
// sandbox a signed URL belongs to. It is refreshed from the engine when a
// signature matches nothing it knows, at most every minRefresh, so that
// bad signatures cannot turn into a database scan each. It is safe for
// concurrent use.
type tokenIndex struct {
	engine     *engine.Engine
	minRefresh time.Duration

	mu        sync.Mutex
	tokens    map[string]string // sandbox id → access token
	refreshed time.Time
}

func newTokenIndex(e *engine.Engine) *tokenIndex {
	return &tokenIndex{engine: e, minRefresh: 250 * time.Millisecond, tokens: map[string]string{}}
}

// add records a sandbox the server just created.
func (x *tokenIndex) add(id, token string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tokens[id] = token
}

// remove forgets a sandbox.
func (x *tokenIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.tokens, id)
}

// find returns the id of the sandbox whose token signed sf.
func (x *tokenIndex) find(ctx context.Context, sf *signedFiles) (string, error) {
	if id := x.match(sf); id != "" {
		return id, nil
	}
	if err := x.refresh(ctx); err != nil {
		return "", err
	}
	if id := x.match(sf); id != "" {
		return id, nil
	}
	return "", fmt.Errorf("the signature matches no running sandbox: %w", errdefs.ErrUnauthenticated)
}

func (x *tokenIndex) match(sf *signedFiles) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, tok := range x.tokens {
		if sf.signedBy(tok) {
			return id
		}
	}
	return ""
}

// refresh reloads the index from the engine unless it did so recently.
func (x *tokenIndex) refresh(ctx context.Context) error {
	x.mu.Lock()
	if time.Since(x.refreshed) < x.minRefresh {
		x.mu.Unlock()
		return nil
	}
	x.refreshed = time.Now()
	x.mu.Unlock()
	sbs, _, err := x.engine.List(ctx, engine.ListOptions{})
	if err != nil {
		return fmt.Errorf("find the sandbox of a signed URL: %w", err)
	}
	tokens := make(map[string]string, len(sbs))
	for _, sb := range sbs {
		if sb.AccessToken != "" {
			tokens[sb.ID] = sb.AccessToken
		}
	}
	x.mu.Lock()
	x.tokens = tokens
	x.mu.Unlock()
	return nil
}
