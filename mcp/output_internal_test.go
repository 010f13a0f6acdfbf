package mcp

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCapHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         string
		limit      int
		wantMarker string
		wantCut    bool
	}{
		{name: "fits", in: "hello", limit: 5},
		{name: "ascii", in: strings.Repeat("a", 100) + strings.Repeat("z", 100), limit: 20, wantMarker: "[truncated: showing 20 of 200 bytes; the middle is left out]", wantCut: true},
		{name: "runes stay whole", in: strings.Repeat("é", 100), limit: 21, wantMarker: "[truncated: showing 20 of 200 bytes", wantCut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := capHeadTail(tc.in, tc.limit)
			if cut != tc.wantCut {
				t.Fatalf("cut %v, want %v", cut, tc.wantCut)
			}
			if !cut {
				if got != tc.in {
					t.Errorf("got %q, want it unchanged", got)
				}
				return
			}
			if !strings.Contains(got, tc.wantMarker) {
				t.Errorf("got %q, want the marker %q", got, tc.wantMarker)
			}
			if !utf8.ValidString(got) {
				t.Errorf("got %q: not valid UTF-8", got)
			}
			if !strings.HasPrefix(got, tc.in[:2]) || !strings.HasSuffix(got, tc.in[len(tc.in)-2:]) {
				t.Errorf("got %q: want the head and the tail kept", got)
			}
		})
	}
}

func TestImageType(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"\x89PNG\r\n\x1a\nrest", "image/png"},
		{"\xff\xd8\xff\xe0", "image/jpeg"},
		{"GIF89a...", "image/gif"},
		{"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"RIFF\x00\x00\x00\x00WAVE", ""},
		{"hello", ""},
	} {
		if got := imageType([]byte(tc.in)); got != tc.want {
			t.Errorf("imageType(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestIsText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"plain\n", true},
		{"caf\xc3\xa9", true},
		{"caf\xc3", true}, // a rune cut at the end of a prefix
		{"a\x00b", false},
		{"\xff\xfe", false},
	} {
		if got := isText([]byte(tc.in)); got != tc.want {
			t.Errorf("isText(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{keep: 4}
	for _, s := range []string{"ab", "cd", "ef", "gh", "ij"} {
		b.Write(s)
	}
	// 10 bytes written; at least the last 4 are kept.
	data, from, total := b.read(0, 100)
	if total != 10 || from == 0 || !strings.HasSuffix("abcdefghij", data) || len(data) < 4 {
		t.Errorf("read(0) = %q from %d of %d", data, from, total)
	}
	data, from, _ = b.read(8, 1)
	if data != "i" || from != 8 {
		t.Errorf("read(8, 1) = %q from %d, want \"i\" from 8", data, from)
	}
	data, from, _ = b.read(99, 10)
	if data != "" || from != 10 {
		t.Errorf("read past the end = %q from %d, want nothing from 10", data, from)
	}
}
