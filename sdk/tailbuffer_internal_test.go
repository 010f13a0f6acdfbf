package sdk

import "testing"

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		keep   int
		chunks []string
		want   string
	}{
		{"keep all", 0, []string{"ab", "cd", "ef"}, "abcdef"},
		{"keep last 3", 3, []string{"ab", "cd", "ef"}, "def"},
		{"bound above size", 100, []string{"ab", "cd"}, "abcd"},
		{"one big chunk", 2, []string{"abcdef"}, "ef"},
		{"keep none", -1, []string{"ab", "cd"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b tailBuffer
			for _, c := range tt.chunks {
				b.add(c, tt.keep)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("kept %q, want %q", got, tt.want)
			}
			if tt.keep > 0 && cap(b.b) > 2*(tt.keep+16) && len(tt.chunks) > 1 {
				t.Errorf("buffer grew to %d bytes under a bound of %d", cap(b.b), tt.keep)
			}
		})
	}
}
