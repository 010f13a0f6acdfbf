package files_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/agent/files"
)

func TestSignatureVectors(t *testing.T) {
	// Expected values computed independently (Python hashlib + base64).
	tests := []struct {
		name, path, op, user, token string
		exp                         int64
		want                        string
	}{
		{"read with user", "/home/user/a.txt", "read", "user", "secret-token", 0,
			"v1_powbkN3fI7yRlWaB5Ui2dRUwVP8UZprfSGludREq8sk"},
		{"write, no user, expiring", "/home/user/a.txt", "write", "", "secret-token", 1700000000,
			"v1_yKIfWf99RjLXk8FXwdccFO8ZrLxrZrfgtk8KVvUBEVc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := files.Signature(tt.path, tt.op, tt.user, tt.token, tt.exp); got != tt.want {
				t.Errorf("Signature = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSignedURLs(t *testing.T) {
	const token = "secret-token"
	base := newServer(t, files.Config{AccessToken: accesstoken.New(token)})
	dir := t.TempDir()
	p := filepath.Join(dir, "signed.txt")
	if err := os.WriteFile(p, []byte("signed"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	sig := func(op, user string, exp int64) string { return files.Signature(p, op, user, token, exp) }
	q := func(kv ...string) []string { return append([]string{"path", p}, kv...) }
	tests := []struct {
		name   string
		method string
		query  []string
		header []string
		status int
	}{
		{"no token, no signature", "GET", q(), nil, 401},
		{"header token", "GET", q(), []string{"X-Access-Token", token}, 200},
		{"wrong header token", "GET", q("signature", sig("read", "", 0)), []string{"X-Access-Token", "nope"}, 401},
		{"read signature", "GET", q("signature", sig("read", "", 0)), nil, 200},
		{"read signature with user", "GET", q("username", "root", "signature", sig("read", "root", 0)), nil, 200},
		{"signature for another user", "GET", q("username", "root", "signature", sig("read", "", 0)), nil, 401},
		{"write signature used to read", "GET", q("signature", sig("write", "", 0)), nil, 401},
		{"wrong signature", "GET", q("signature", "v1_AAAA"), nil, 401},
		{"unexpired", "GET", q("signature", sig("read", "", future), "signature_expiration", fmt.Sprint(future)), nil, 200},
		{"expired", "GET", q("signature", sig("read", "", past), "signature_expiration", fmt.Sprint(past)), nil, 401},
		{"expiration altered", "GET", q("signature", sig("read", "", past), "signature_expiration", fmt.Sprint(future)), nil, 401},
		{"expiration not a number", "GET", q("signature", sig("read", "", 0), "signature_expiration", "soon"), nil, 401},
		{"write signature", "POST", q("signature", sig("write", "", 0)), nil, 200},
		{"read signature used to write", "POST", q("signature", sig("read", "", 0)), nil, 401},
		{"write with header token", "POST", q(), []string{"X-Access-Token", token}, 200},
		{"write without anything", "POST", q(), nil, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body *strings.Reader
			ct := ""
			if tt.method == "POST" {
				body, ct = strings.NewReader("signed"), "application/octet-stream"
			}
			var status int
			var got []byte
			if body != nil {
				status, got = do(t, tt.method, filesURL(base, tt.query...), ct, body, tt.header...)
			} else {
				status, got = do(t, tt.method, filesURL(base, tt.query...), ct, nil, tt.header...)
			}
			if tt.status != http.StatusOK {
				checkError(t, status, got, tt.status)
				return
			}
			if status != http.StatusOK {
				t.Fatalf("status = %d: %s", status, got)
			}
		})
	}
}

// TestReplacedTokenTakesEffect checks that once the token the handler
// holds is replaced (as the agent's /init does after a restore), URLs
// signed with the old token and the old header stop working, and the new
// token opens /files both ways.
func TestReplacedTokenTakesEffect(t *testing.T) {
	const oldToken, newToken = "old-token-0123456789", "new-token-0123456789"
	tok := accesstoken.New(oldToken)
	base := newServer(t, files.Config{AccessToken: tok})
	p := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := func(token string) string {
		return filesURL(base, "path", p, "signature", files.Signature(p, "read", "", token, 0))
	}
	oldURL := signed(oldToken)
	if status, body := do(t, "GET", oldURL, "", nil); status != http.StatusOK {
		t.Fatalf("before the change, the old signature: %d %s", status, body)
	}
	tok.Set(newToken)
	tests := []struct {
		name   string
		url    string
		header []string
		status int
	}{
		{"old signature", oldURL, nil, 401},
		{"old header", filesURL(base, "path", p), []string{"X-Access-Token", oldToken}, 401},
		{"new signature", signed(newToken), nil, 200},
		{"new header", filesURL(base, "path", p), []string{"X-Access-Token", newToken}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := do(t, "GET", tt.url, "", nil, tt.header...)
			if tt.status != http.StatusOK {
				checkError(t, status, got, tt.status)
				return
			}
			if status != http.StatusOK || string(got) != "x" {
				t.Fatalf("status = %d: %s", status, got)
			}
		})
	}
}
