package accesstoken_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lightbearco/tupper/agent/accesstoken"
	"github.com/lightbearco/tupper/errdefs"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{name: "hex", token: "0123456789abcdef0123456789abcdef", ok: true},
		{name: "shortest", token: strings.Repeat("a", accesstoken.MinLen), ok: true},
		{name: "longest", token: strings.Repeat("a", accesstoken.MaxLen), ok: true},
		{name: "punctuation", token: "tok_-.~!+/=0123456789", ok: true},
		{name: "empty"},
		{name: "too short", token: strings.Repeat("a", accesstoken.MinLen-1)},
		{name: "too long", token: strings.Repeat("a", accesstoken.MaxLen+1)},
		{name: "space", token: "0123456789 abcdef"},
		{name: "newline", token: "0123456789abcdef\n"},
		{name: "NUL", token: "0123456789\x00abcdef"},
		{name: "not ASCII", token: "0123456789abcdéf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := accesstoken.Check(tt.token)
			if (err == nil) != tt.ok {
				t.Fatalf("Check = %v, want ok %v", err, tt.ok)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%v is not ErrInvalidArgument", err)
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Errorf("the error repeats the token: %v", err)
			}
		})
	}
}

func TestOpens(t *testing.T) {
	var none *accesstoken.Token
	if !none.Opens("") || !none.Opens("anything") || none.Get() != "" {
		t.Error("a nil Token guards something")
	}
	tok := accesstoken.New("")
	if !tok.Opens("anything") {
		t.Error("an empty Token guards something")
	}
	tok.Set("first-token-0123456789")
	if tok.Opens("") || tok.Opens("first-token-012345678") || !tok.Opens("first-token-0123456789") {
		t.Error("the token does not open exactly with itself")
	}
	tok.Set("second-token-0123456789")
	if tok.Opens("first-token-0123456789") || !tok.Opens("second-token-0123456789") || tok.Get() != "second-token-0123456789" {
		t.Error("the old token still opens after Set")
	}
}

// TestConcurrentSet is for the race detector: checks read the token while
// it is replaced.
func TestConcurrentSet(t *testing.T) {
	tok := accesstoken.New("a-token-0123456789")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 1000 {
				if i == 0 {
					tok.Set("b-token-0123456789")
				} else {
					tok.Opens("b-token-0123456789")
				}
			}
		})
	}
	wg.Wait()
	if !tok.Opens("b-token-0123456789") {
		t.Error("the last Set did not take")
	}
}
