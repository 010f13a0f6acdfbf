package testutil

import "testing"

func TestForbids(t *testing.T) {
	tests := []struct {
		name, f, p string
		want       bool
	}{
		{"the package itself", "engine", "engine", true},
		{"below it", "engine", "engine/store", true},
		{"a longer name is another package", "engine", "enginex", false},
		{"below only", "backend/", "backend/gvisor", true},
		{"below only spares the package", "backend/", "backend", false},
		{"nested path", "internal/cli", "internal/cli", true},
		{"sibling of a nested path", "internal/cli", "internal/testutil", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := forbids(tt.f, tt.p); got != tt.want {
				t.Errorf("forbids(%q, %q) = %v, want %v", tt.f, tt.p, got, tt.want)
			}
		})
	}
}
