package auth

import (
	"context"
	"path/filepath"
	"testing"
)

func TestHas(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, k, err := s.Create(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, id string
		want     bool
	}{
		{name: "stored", id: k.ID, want: true},
		{name: "never made", id: "key_000000000000", want: false},
		{name: "a name is not an id", id: "one", want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Has(ctx, tt.id)
			if err != nil || got != tt.want {
				t.Errorf("Has(%q) = %v, %v; want %v", tt.id, got, err, tt.want)
			}
		})
	}
	if err := s.Remove(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Has(ctx, k.ID); err != nil || got {
		t.Errorf("Has of a removed key = %v, %v; want false", got, err)
	}
}
