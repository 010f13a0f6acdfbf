package netpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/lightbearco/tupper/errdefs"
)

func TestReplaceSecretPlaceholders(t *testing.T) {
	ids := map[string]string{"openai": "sec_1", "team key": "sec_2"}
	repl := func(name string) (string, error) {
		id, ok := ids[name]
		if !ok {
			return "", errors.New("unknown " + name)
		}
		return SecretRef(id), nil
	}
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "no placeholder", in: "Bearer plain", want: "Bearer plain"},
		{name: "whole value", in: "${e2b.secrets.openai}", want: "${tupper.secret.sec_1}"},
		{name: "mixed with text", in: "Bearer ${e2b.secrets.openai}; team=${e2b.secrets.team key}!",
			want: "Bearer ${tupper.secret.sec_1}; team=${tupper.secret.sec_2}!"},
		{name: "twice", in: "${e2b.secrets.openai}${e2b.secrets.openai}", want: "${tupper.secret.sec_1}${tupper.secret.sec_1}"},
		{name: "other dollar text", in: "$5 ${HOME} ${e2b.other.x}", want: "$5 ${HOME} ${e2b.other.x}"},
		{name: "unknown name", in: "${e2b.secrets.nosuch}", wantErr: true},
		{name: "not closed", in: "Bearer ${e2b.secrets.openai", wantErr: true},
		{name: "empty name", in: "${e2b.secrets.}", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReplaceSecretPlaceholders(tt.in, repl)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := ReplaceSecretPlaceholders("${e2b.secrets.x", repl); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unclosed: %v, want invalid argument", err)
	}
}

func TestExpandSecretRefs(t *testing.T) {
	values := map[string]string{"sec_1": "sk-one", "sec_2": "${tupper.secret.sec_1}"}
	value := func(id string) (string, error) {
		v, ok := values[id]
		if !ok {
			return "", errors.New("gone")
		}
		return v, nil
	}
	got, err := ExpandSecretRefs("Bearer ${tupper.secret.sec_1}", value)
	if err != nil || got != "Bearer sk-one" {
		t.Errorf("got %q, %v", got, err)
	}
	// A value is not scanned again: a secret whose value looks like a
	// reference does not open another secret.
	got, err = ExpandSecretRefs("${tupper.secret.sec_2}", value)
	if err != nil || got != "${tupper.secret.sec_1}" {
		t.Errorf("a value that looks like a reference: got %q, %v", got, err)
	}
	if _, err := ExpandSecretRefs("x ${tupper.secret.sec_9} y", value); err == nil {
		t.Error("a reference to a missing secret expanded")
	}
	_, err = ExpandSecretRefs("prefix-text ${tupper.secret.sec_1", value)
	if err == nil || strings.Contains(err.Error(), "prefix-text") {
		t.Errorf("unclosed reference: %v; want an error that does not quote the value", err)
	}
	if !HasSecretRef(SecretRef("sec_1")) || HasSecretRef("${e2b.secrets.x}") || !HasSecretPlaceholder("a ${e2b.secrets.x}") {
		t.Error("HasSecretRef or HasSecretPlaceholder is wrong")
	}
}
