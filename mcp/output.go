package mcp

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// truncationMarker says how much of an output a tool shows. Clients and
// tests may look for its "[truncated: showing N of M bytes" prefix.
func truncationMarker(shown, total int64, more string) string {
	if more == "" {
		return fmt.Sprintf("[truncated: showing %d of %d bytes]", shown, total)
	}
	return fmt.Sprintf("[truncated: showing %d of %d bytes; %s]", shown, total, more)
}

// capHeadTail returns s whole when it fits in limit bytes; otherwise its
// first and last halves around a truncation marker, since a command's
// first lines say what it did and its last ones how it ended.
func capHeadTail(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	head := cutBefore(s, limit/2)
	tail := cutAfter(s, len(s)-(limit-len(head)))
	marker := truncationMarker(int64(len(head)+len(tail)), int64(len(s)), "the middle is left out")
	return head + "\n" + marker + "\n" + tail, true
}

// cutBefore returns s's prefix of at most n bytes that ends on a rune
// boundary.
func cutBefore(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}

// cutAfter returns s's suffix from byte i on, moved forward to a rune
// boundary.
func cutAfter(s string, i int) string {
	if i <= 0 {
		return s
	}
	for j := i; j < len(s) && j < i+utf8.UTFMax; j++ {
		if utf8.RuneStart(s[j]) {
			return s[j:]
		}
	}
	return s[i:]
}

// imageType returns the MIME type of an image recognised by its magic
// bytes (PNG, JPEG, GIF, WebP), or "".
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && bytes.Equal(b[:4], []byte("RIFF")) && bytes.Equal(b[8:12], []byte("WEBP")):
		return "image/webp"
	}
	return ""
}

// isText reports whether b reads as UTF-8 text. A rune cut at the end
// (b may be a prefix of a file) still counts as text.
func isText(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	if utf8.Valid(b) {
		return true
	}
	// Drop an incomplete last rune and check again.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return !utf8.FullRune(b[i:]) && utf8.Valid(b[:i])
		}
	}
	return false
}
