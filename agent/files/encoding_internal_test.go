package files

import "testing"

func TestWantsGzip(t *testing.T) {
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip, deflate", false}, // Node's fetch: identity ties, identity wins
		{"gzip, deflate, br", false},
		{"gzip", false},
		{"identity", false},
		{"gzip, identity;q=0", true},
		{"gzip;q=1.0, identity; q=0.5, *;q=0", true},
		{"gzip;q=0.5, identity;q=1", false},
		{"gzip;q=0", false},
		{"*;q=0, gzip", true}, // identity refused through "*"
		{"*", false},
		{"x-gzip, identity;q=0", true},
		{"GZIP, Identity;Q=0", true},
		{"br, identity;q=0", false}, // no gzip: the handler can only send identity
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			if got := wantsGzip(tt.header); got != tt.want {
				t.Errorf("wantsGzip(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}
