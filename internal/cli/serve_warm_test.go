package cli

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lightbearco/tupper/engine"
	"github.com/lightbearco/tupper/errdefs"
)

func TestParseWarm(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  []engine.PoolConfig
		bad   bool
	}{
		{name: "pools", flags: []string{"base=2", "code-interpreter=1"}, want: []engine.PoolConfig{{Template: "base", Size: 2}, {Template: "code-interpreter", Size: 1}}},
		{name: "none turns the default pool off", flags: []string{"none"}},
		{name: "zero", flags: []string{"base=0"}, want: []engine.PoolConfig{{Template: "base", Size: 0}}},
		{name: "no size", flags: []string{"base"}, bad: true},
		{name: "negative", flags: []string{"base=-1"}, bad: true},
		{name: "too many", flags: []string{"base=1001"}, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWarm(tt.flags)
			if tt.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("parseWarm(%q) = %v, %v; want an invalid argument", tt.flags, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
