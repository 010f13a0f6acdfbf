package netpolicy

import (
	"fmt"
	"strings"

	"github.com/lightbearco/tupper/errdefs"
)

// A rule's header value may use secrets, which the daemon keeps sealed
// and the egress proxy puts in only as it sends each request: the value
// itself never reaches the sandbox, its record or any listing. Two forms
// name a secret inside a header value, any number of times, mixed with
// text:
//
//   - "${e2b.secrets.NAME}" is E2B's placeholder, as its SDKs write it
//     (Secret.fill): what a create or a network update carries. The
//     engine checks NAME against the secrets of the sandbox's team and
//     replaces the placeholder with a reference.
//   - "${tupper.secret.ID}" is that reference, to the secret's id: what
//     the sandbox's recorded policy holds and the egress proxy resolves.
//     Only the engine writes it; clients may not.

const (
	secretPlaceholderOpen = "${e2b.secrets."
	secretRefOpen         = "${tupper.secret."
)

// SecretRef returns the reference to secret id that a recorded header
// value holds in place of a placeholder.
func SecretRef(id string) string { return secretRefOpen + id + "}" }

// HasSecretPlaceholder reports whether v holds an E2B secret placeholder.
func HasSecretPlaceholder(v string) bool { return strings.Contains(v, secretPlaceholderOpen) }

// HasSecretRef reports whether v holds a reference to a secret.
func HasSecretRef(v string) bool { return strings.Contains(v, secretRefOpen) }

// ReplaceSecretPlaceholders returns v with each "${e2b.secrets.NAME}"
// replaced by what repl returns for NAME. A placeholder that is not closed
// by '}', or that names nothing, fails with errdefs.ErrInvalidArgument.
func ReplaceSecretPlaceholders(v string, repl func(name string) (string, error)) (string, error) {
	return replaceBetween(v, secretPlaceholderOpen, repl)
}

// ExpandSecretRefs returns v with each "${tupper.secret.ID}" replaced by
// what value returns for ID: the header value as it is sent. What value
// returns is not scanned again. Its own errors never quote v.
func ExpandSecretRefs(v string, value func(id string) (string, error)) (string, error) {
	return replaceBetween(v, secretRefOpen, value)
}

// replaceBetween replaces each open…"}" in v with f of what lies between.
func replaceBetween(v, open string, f func(string) (string, error)) (string, error) {
	if !strings.Contains(v, open) {
		return v, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(v, open)
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		b.WriteString(v[:i])
		rest := v[i+len(open):]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return "", fmt.Errorf("%s… is not closed by '}': %w", open, errdefs.ErrInvalidArgument)
		}
		if j == 0 {
			return "", fmt.Errorf("%s} names no secret: %w", open, errdefs.ErrInvalidArgument)
		}
		out, err := f(rest[:j])
		if err != nil {
			return "", err
		}
		b.WriteString(out)
		v = rest[j+1:]
	}
}
