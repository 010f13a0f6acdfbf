package identity

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

func TestResolvePath(t *testing.T) {
	u := &User{Name: "user", Home: "/home/user"}
	tests := []struct {
		name, in, want string
		err            error
	}{
		{"absolute", "/etc/passwd", "/etc/passwd", nil},
		{"relative", "data/a.txt", "/home/user/data/a.txt", nil},
		{"tilde", "~", "/home/user", nil},
		{"tilde slash", "~/x/../y", "/home/user/y", nil},
		{"dot dot stays inside root", "/../../etc", "/etc", nil},
		{"spaces and unicode", "dir with space/ünï 文件", "/home/user/dir with space/ünï 文件", nil},
		{"empty", "", "", errdefs.ErrInvalidArgument},
		{"nul byte", "a\x00b", "", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := u.ResolvePath(tt.in)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("ResolvePath(%q) error = %v, want %v", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Errorf("ResolvePath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFromRequest(t *testing.T) {
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, auth, query, want string
		err                     error
	}{
		{"default", "", "", "root", nil},
		{"header", basic("root:"), "", "root", nil},
		{"query", "", "username=root", "root", nil},
		{"header wins", basic("root:"), "username=nobody", "root", nil},
		{"unknown user", basic("no-such-user-here:"), "", "", errdefs.ErrUnauthenticated},
		{"not basic", "Bearer x", "", "", errdefs.ErrUnauthenticated},
		{"not base64", "Basic !!!", "", "", errdefs.ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/files?"+tt.query, nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			u, err := FromRequest(r, "root")
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("FromRequest error = %v, want %v", err, tt.err)
			}
			if err == nil && u.Name != tt.want {
				t.Errorf("user = %q, want %q", u.Name, tt.want)
			}
		})
	}
}
