package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/errdefs"
)

// jsMetadataQuery encodes a metadata filter the way the E2B JS SDK 2.51
// does: encodeURIComponent on each key and value, then URLSearchParams.
// What the server reads is the result, after the HTTP layer's own
// decoding of the parameter.
func jsMetadataQuery(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, formEncode(encodeURIComponent(k))+"="+formEncode(encodeURIComponent(v)))
	}
	return strings.Join(parts, "&")
}

// encodeURIComponent is JavaScript's: everything but A–Z a–z 0–9 - _ . ! ~ * ' ( ) is escaped.
func encodeURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// formEncode is URLSearchParams' serializer: space is '+', and everything
// but A–Z a–z 0–9 * - . _ is escaped.
func formEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			b.WriteByte('+')
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("*-._", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestParseMetadataQuery(t *testing.T) {
	tricky := map[string]string{"a b": "x&y=z", "plus": "1+1", "pct": "100%", "ü": "ö/"}
	tests := []struct {
		name string
		raw  string
		want map[string]string
		err  bool
	}{
		{name: "empty", raw: "", want: nil},
		{name: "plain", raw: "owner=alice&env=dev", want: map[string]string{"owner": "alice", "env": "dev"}},
		// Node's output for the tricky map, as printed by the SDK's code.
		{name: "JS SDK, recorded", raw: "a%2520b=x%2526y%253Dz&plus=1%252B1&pct=100%2525&%25C3%25BC=%25C3%25B6%252F", want: tricky},
		{name: "JS SDK, simulated", raw: jsMetadataQuery(tricky), want: tricky},
		{name: "Python SDK", raw: url.Values{"a b": {"x&y=z"}, "plus": {"1+1"}, "pct": {"100%"}}.Encode(),
			want: map[string]string{"a b": "x&y=z", "plus": "1+1", "pct": "100%"}},
		{name: "empty value", raw: "k=", want: map[string]string{"k": ""}},
		{name: "same pair twice", raw: "k=v&k=v", want: map[string]string{"k": "v"}},
		{name: "conflicting pair", raw: "k=v&k=w", err: true},
		{name: "empty key", raw: "=v", err: true},
		{name: "bad escape", raw: "k=%zz", err: true},
		{name: "semicolon", raw: "k=v;x=y", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMetadataQuery(tt.raw)
			if tt.err {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("parse %q = %v, %v; want ErrInvalidArgument", tt.raw, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("parse %q (-want +got):\n%s", tt.raw, d)
			}
		})
	}
}

func TestParseListQuery(t *testing.T) {
	tests := []struct {
		name  string
		query string
		def   int
		want  *listQuery
		err   bool
	}{
		{name: "defaults", query: "", def: 100, want: &listQuery{Limit: 100}},
		{name: "v1 default", query: "", def: 0, want: &listQuery{}},
		{name: "JS states", query: "state=running,paused", def: 100, want: &listQuery{Limit: 100, States: []string{"running", "paused"}}},
		{name: "Python states", query: "state=paused&state=running&state=paused", def: 100, want: &listQuery{Limit: 100, States: []string{"paused", "running"}}},
		{name: "limit and token", query: "limit=5&nextToken=abc", def: 100, want: &listQuery{Limit: 5, NextToken: "abc"}},
		{name: "template and time", query: "template=base&startedAfter=2026-01-02T03:04:05.678Z", def: 100,
			want: &listQuery{Limit: 100, Template: "base", StartedAfter: time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)}},
		{name: "limit 0", query: "limit=0", err: true},
		{name: "limit 101", query: "limit=101", err: true},
		{name: "limit word", query: "limit=all", err: true},
		{name: "state killed", query: "state=killed", err: true},
		{name: "bad time", query: "startedAfter=yesterday", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := parseListQuery(q, tt.def)
			if tt.err {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("= %+v, %v; want ErrInvalidArgument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestParseSandboxHost(t *testing.T) {
	tests := []struct {
		host string
		want hostTarget
		ok   bool
	}{
		{host: "49983-abc123.localhost", want: hostTarget{49983, "abc123"}, ok: true},
		{host: "8080-i2k3j4h5g6f7d8s9a0q1.sandbox.example.com:3000", want: hostTarget{8080, "i2k3j4h5g6f7d8s9a0q1"}, ok: true},
		{host: "80-ABC.localhost", want: hostTarget{80, "abc"}, ok: true},
		{host: "65535-a.x", want: hostTarget{65535, "a"}, ok: true},
		{host: "65536-a.x"},
		{host: "0-a.x"},
		{host: "080-a.x"},
		{host: "-a.x"},
		{host: "80-.x"},
		{host: "80-a"},
		{host: "80-a."},
		{host: "80-a_b.x"},
		{host: "localhost:3000"},
		{host: "127.0.0.1:3000"},
		{host: "[::1]:3000"},
		{host: ""},
		{host: "x80-a.x"},
	}
	for _, tt := range tests {
		got, ok := parseSandboxHost(tt.host)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseSandboxHost(%q) = %+v, %v; want %+v, %v", tt.host, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCheckAgentPath(t *testing.T) {
	tests := []struct {
		path string
		want int
	}{
		{"/process.Process/Start", 0},
		{"/filesystem.Filesystem/ListDir", 0},
		{"/files", 0},
		{"/health", 0},
		{"/envs", 0},
		{"/metrics", 0},
		{"/init", 403},
		{"/freeze", 403},
		{"/unfreeze", 403},
		{"/snapshot", 403},
		{"/snapshot/prepare", 403},
		{"/", 404},
		{"/files/x", 404},
		{"/initx", 404},
		{"/process.Process/../../init", 400},
		{"/process.Process/./Start", 400},
		{"//health", 400},
	}
	for _, tt := range tests {
		if got, msg := checkAgentPath(tt.path); got != tt.want {
			t.Errorf("checkAgentPath(%q) = %d %q, want %d", tt.path, got, msg, tt.want)
		}
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{errdefs.ErrNotFound, 404},
		{errdefs.ErrAlreadyExists, 409},
		{errdefs.ErrInvalidArgument, 400},
		{errdefs.ErrFailedPrecondition, 409},
		{errdefs.ErrNotSupported, 501},
		{errdefs.ErrResourceExhausted, 429},
		{errdefs.ErrUnavailable, 503},
		{errdefs.ErrUnauthenticated, 401},
		{errdefs.ErrPermissionDenied, 403},
		{errdefs.ErrDeadlineExceeded, 504},
		{errors.New("boom"), 500},
	}
	for _, tt := range tests {
		wrapped := fmt.Errorf("sandbox %q: %w", "x", tt.err)
		if got := statusOf(wrapped); got != tt.want {
			t.Errorf("statusOf(%v) = %d, want %d", wrapped, got, tt.want)
		}
	}
}

func TestFileSignatureVectors(t *testing.T) {
	// Computed with Node's crypto exactly as the E2B JS SDK's getSignature
	// does (sha256, standard base64, padding stripped).
	tests := []struct {
		path, op, user, token string
		exp                   int64
		want                  string
	}{
		{"/home/user/a.txt", "read", "user", "tok123", 0, "v1_HB2bgZ+RgifWQVkD4WDT8wNBFTVrggZWSRD5EqI0H/0"},
		{"/home/user/a.txt", "write", "", "tok123", 1700000000, "v1_js9/4f5ea8GZ42Fpws+LDWeYh0p1HcmG8oA/zBD7lQ4"},
	}
	for _, tt := range tests {
		if got := fileSignature(tt.path, tt.op, tt.user, tt.token, tt.exp); got != tt.want {
			t.Errorf("fileSignature(%q, %q, %q, %q, %d) = %s, want %s", tt.path, tt.op, tt.user, tt.token, tt.exp, got, tt.want)
		}
	}
}

func TestWriteDataErrorShapes(t *testing.T) {
	for _, tt := range []struct {
		path, want string
	}{
		{"/process.Process/Start", `{"code":"unavailable","message":"m"}`},
		{"/filesystem.Filesystem/Stat", `{"code":"unavailable","message":"m"}`},
		{"/files", `{"code":502,"message":"m"}`},
		{"/health", `{"code":502,"message":"m"}`},
	} {
		rec := newRecorder()
		writeDataError(rec, &http.Request{URL: &url.URL{Path: tt.path}}, http.StatusBadGateway, "m")
		if got := strings.TrimSpace(rec.body.String()); got != tt.want || rec.status != 502 {
			t.Errorf("%s: %d %s, want 502 %s", tt.path, rec.status, got, tt.want)
		}
	}
}

type recorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func newRecorder() *recorder                    { return &recorder{header: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(s int)           { r.status = s }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

// validUTF8 keeps fuzz inputs to what a JS string can hold.
func validUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
