package server

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightbearco/tupper/errdefs"
)

// The fuzz targets' seeds run as ordinary tests; `go test -fuzz=FuzzX
// ./server` explores further.

// checkDecodeError fails unless err is a client error with a message.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("error %v is neither ErrInvalidArgument nor ErrNotSupported", err)
	}
	if statusOf(err) >= 500 && !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("error %v maps to %d", err, statusOf(err))
	}
}

func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `{"templateID":"base","timeout":300}`,
		`{"templateID":"base","metadata":{"a":"b"},"envVars":{"X":"1"},"timeout":1.5}`,
		`{"network":{"allowOut":["example.com","*.x.io","10.0.0.0/8"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false,"rules":{"a.io":[]}}}`,
		`{"secure":true,"allow_internet_access":false,"autoPause":true,"autoResume":{"enabled":true},"mcp":{"x":{}}}`,
		`{"volumeMounts":[{"name":"v","path":"/d"}]}`,
		`{"timeout":-1}`, `{"timeout":1e309}`, `{"timeout":"1"}`, `{"metadata":[]}`, `[]`, `{`, `{} {}`, `"x"`,
		`{"network":{"denyOut":["example.com"]}}`, `{"network":{"rules":[1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeCreate(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if b.Timeout < 0 || b.Timeout > maxTimeoutSeconds*time.Second {
			t.Fatalf("decodeCreate(%q) = %+v", data, b)
		}
		if b.Timeout%time.Second != 0 {
			t.Fatalf("timeout %v is not whole seconds", b.Timeout)
		}
		if b.Network != nil {
			// A checked policy is canonical: checking it again changes
			// nothing.
			again := b.Network.Clone()
			if err := again.Normalize(); err != nil {
				t.Fatalf("a checked policy fails a second check: %v", err)
			}
			if strings.Join(again.AllowOut, ",") != strings.Join(b.Network.AllowOut, ",") ||
				strings.Join(again.DenyOut, ",") != strings.Join(b.Network.DenyOut, ",") {
				t.Fatalf("canonical forms move: %v → %v", b.Network, again)
			}
		}
	})
}

func FuzzDecodeConnectAndTimeout(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"timeout":60}`, `{"timeout":0}`, `{"timeout":0.001}`, `{"timeout":-5}`,
		`{"timeout":null}`, `{"timeout":60,"memory":false}`, `{"timeout":[]}`, `{`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := decodeConnect(data)
		if err != nil {
			checkDecodeError(t, err)
		} else if c < 0 {
			t.Fatalf("decodeConnect(%q) = %v", data, c)
		}
		d, err := decodeTimeout(data)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if d < time.Second {
			t.Fatalf("decodeTimeout(%q) = %v, want at least a second", data, d)
		}
	})
}

func FuzzSignedFiles(f *testing.F) {
	f.Add("GET", "/home/user/a.txt", "user", "tok123", int64(0), "")
	f.Add("POST", "rel/path with spaces.txt", "", "0123456789abcdef", int64(1700000000), "x")
	f.Add("GET", "/a:b:c", "ro:ot", "t:o:k", int64(-1), "v1_")
	f.Add("PUT", "", "", "", int64(0), "")
	f.Fuzz(func(t *testing.T, method, path, user, token string, exp int64, garbage string) {
		op := "read"
		if method == http.MethodPost {
			op = "write"
		}
		// A URL signed the way the SDKs sign it verifies, for this token
		// only, through the query string a client would send.
		q := url.Values{}
		q.Set("path", path)
		q.Set("username", user)
		q.Set("signature", fileSignature(path, op, user, token, exp))
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		parsed, err := url.ParseQuery(q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		sf, err := parseSignedFiles(method, parsed)
		switch {
		case method != "GET" && method != "HEAD" && method != "POST":
			if err == nil {
				t.Fatalf("method %q accepted", method)
			}
			return
		case exp < 0:
			if err == nil {
				t.Fatalf("expiration %d accepted", exp)
			}
			return
		case err != nil:
			t.Fatalf("parse a well-signed URL: %v", err)
		}
		if !sf.signedBy(token) {
			t.Fatalf("the signature does not verify: %+v", sf)
		}
		if token != token+garbage && sf.signedBy(token+garbage) {
			t.Fatalf("the signature verifies with another token %q", token+garbage)
		}
		if garbage != "" {
			forged := *sf
			forged.Path += garbage
			if forged.signedBy(token) {
				t.Fatalf("the signature verifies for another path")
			}
		}
		// Arbitrary queries never panic, and whatever parses has an op.
		raw, err := url.ParseQuery(garbage)
		if err == nil {
			if sf, err := parseSignedFiles(method, raw); err == nil && sf.Op == "" {
				t.Fatal("parsed without an operation")
			}
		}
	})
}

func FuzzMetadataQuery(f *testing.F) {
	f.Add("owner", "alice", "")
	f.Add("a b", "x&y=z", "k=v&k=w")
	f.Add("plus", "1+1", "%zz")
	f.Add("pct", "100%", "=v")
	f.Add("ü", "ö/", "a%2520b=x")
	f.Fuzz(func(t *testing.T, key, value, raw string) {
		// Anything parses or fails cleanly.
		if m, err := parseMetadataQuery(raw); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("parse %q: %v", raw, err)
			}
		} else {
			for k := range m {
				if k == "" {
					t.Fatalf("parse %q gave an empty key", raw)
				}
			}
		}
		if key == "" || !validUTF8(key, value) {
			return
		}
		// What the JS SDK sends comes back exactly.
		want := map[string]string{key: value}
		got, err := parseMetadataQuery(jsMetadataQuery(want))
		if err != nil || len(got) != 1 || got[key] != value {
			t.Fatalf("JS filter %q=%q read back as %q, %v", key, value, got, err)
		}
		// What the Python SDK sends comes back exactly unless it holds a
		// valid percent-escape (see parseMetadataQuery).
		if strings.Contains(key+value, "%") {
			return
		}
		got, err = parseMetadataQuery(url.Values{key: {value}}.Encode())
		if err != nil || len(got) != 1 || got[key] != value {
			t.Fatalf("Python filter %q=%q read back as %q, %v", key, value, got, err)
		}
	})
}
