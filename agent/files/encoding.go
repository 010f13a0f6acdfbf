package files

import (
	"strconv"
	"strings"
)

// wantsGzip reports whether a download should be gzip-compressed: only when
// the client's Accept-Encoding ranks gzip strictly above identity.
//
// Identity is always an acceptable answer in HTTP unless the client refuses
// it, and it is the fast one: Node's fetch, which the E2B JS SDK uses, sends
// "Accept-Encoding: gzip, deflate" on every request and then inflates large
// bodies at under 2 MB/s, where the same file uncompressed moves at hundreds
// of MB/s (measured in the wire spec, §4). So "gzip, deflate" (gzip and
// identity tied at q=1) gets identity; "gzip, identity;q=0" or
// "gzip;q=1, identity;q=0.5" gets gzip.
func wantsGzip(acceptEncoding string) bool {
	if acceptEncoding == "" {
		return false
	}
	gzipQ, identityQ, starQ := -1.0, -1.0, -1.0
	for _, item := range strings.Split(acceptEncoding, ",") {
		name, params, _ := strings.Cut(item, ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip", "x-gzip":
			gzipQ = max(gzipQ, q)
		case "identity":
			identityQ = max(identityQ, q)
		case "*":
			starQ = max(starQ, q)
		}
	}
	// Unlisted codings take the "*" weight; identity, when neither it nor
	// "*" is listed, is acceptable at full weight (RFC 9110 §12.5.3).
	if gzipQ < 0 {
		gzipQ = starQ
	}
	if identityQ < 0 {
		identityQ = starQ
		if identityQ < 0 {
			identityQ = 1
		}
	}
	return gzipQ > 0 && gzipQ > identityQ
}
