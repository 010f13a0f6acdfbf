package cli

import "testing"

func TestParseSizeMB(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{in: "2G", want: 2048, ok: true},
		{in: "2g", want: 2048, ok: true},
		{in: "2GiB", want: 2048, ok: true},
		{in: "2GB", want: 2048, ok: true},
		{in: "1.5G", want: 1536, ok: true},
		{in: "512M", want: 512, ok: true},
		{in: "512", want: 512, ok: true},
		{in: "1T", want: 1 << 20, ok: true},
		{in: " 64m ", want: 64, ok: true},
		{in: "0", want: 0, ok: true},
		{in: ""},
		{in: "G"},
		{in: "-1G"},
		{in: "0.1M"},
		{in: "2K"},
		{in: "lots"},
		{in: "NaN"},
		{in: "1e12T"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSizeMB(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("parseSizeMB(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
	var f sizeFlag
	for _, s := range []string{"2G", "1T", "1536M"} {
		if err := f.Set(s); err != nil || f.String() != s {
			t.Errorf("Set(%q) then String() = %q, %v", s, f.String(), err)
		}
	}
}
