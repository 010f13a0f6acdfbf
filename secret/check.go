package secret

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lightbearco/tupper/errdefs"
)

// Bounds of a secret, as E2B documents them for its API.
const (
	// MaxNameBytes bounds a name.
	MaxNameBytes = 256
	// MaxValueBytes bounds a value.
	MaxValueBytes = 64 << 10
	// MaxMetadataEntries, MaxMetadataKey, MaxMetadataValue and
	// MaxMetadataBytes bound a secret's metadata: the number of keys, a
	// key's and a value's length, and all keys and values together.
	MaxMetadataEntries = 32
	MaxMetadataKey     = 128
	MaxMetadataValue   = 1024
	MaxMetadataBytes   = 8192
)

// IDPrefix starts every secret's id. No name may start with it, so that a
// reference to a secret by id or name is never ambiguous.
const IDPrefix = "sec_"

// newID returns a fresh secret id.
func newID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("secret: no randomness: %v", err))
	}
	return IDPrefix + hex.EncodeToString(b)
}

// IsID reports whether ref has the form of a secret's id rather than a
// name.
func IsID(ref string) bool { return strings.HasPrefix(ref, IDPrefix) }

// CanonicalName returns name as it is stored and compared: lower case, as
// E2B keeps names.
func CanonicalName(name string) string { return strings.ToLower(name) }

// CheckName reports whether name may name a secret: 1 to MaxNameBytes
// bytes of UTF-8, with no '{', '}' or control character (a name goes
// inside the "${e2b.secrets.NAME}" placeholder), not starting with
// IDPrefix in any case.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a secret's name must not be empty: %w", errdefs.ErrInvalidArgument)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("secret name %.40q…: a name takes at most %d bytes: %w", name, MaxNameBytes, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("secret name %q is not valid UTF-8: %w", name, errdefs.ErrInvalidArgument)
	case strings.ContainsAny(name, "{}") || strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("secret name %q holds '{', '}' or a control character, which cannot go in a ${e2b.secrets.NAME} placeholder: %w", name, errdefs.ErrInvalidArgument)
	case IsID(CanonicalName(name)):
		return fmt.Errorf("secret name %q: names starting with %q are reserved for secrets' ids: %w", name, IDPrefix, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckValue reports whether value may be a secret's value: 1 to
// MaxValueBytes bytes that an HTTP header may carry (no control character
// but the tab), since network rules send secrets as header values. Its
// errors never quote the value.
func CheckValue(value string) error {
	if value == "" {
		return fmt.Errorf("a secret's value must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("a secret's value takes at most %d bytes, not %d: %w", MaxValueBytes, len(value), errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("a secret's value holds a control character (byte %d): secrets are sent as HTTP header values, which cannot carry line breaks, NUL or other control characters: %w", i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckMetadata reports whether md is within the bounds of a secret's
// metadata.
func CheckMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return fmt.Errorf("a secret's metadata hold at most %d keys, not %d: %w", MaxMetadataEntries, len(md), errdefs.ErrInvalidArgument)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetadataKey || len(v) > MaxMetadataValue {
			return fmt.Errorf("secret metadata key %.40q: keys take 1 to %d bytes and values at most %d: %w", k, MaxMetadataKey, MaxMetadataValue, errdefs.ErrInvalidArgument)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("a secret's metadata take at most %d bytes, not %d: %w", MaxMetadataBytes, total, errdefs.ErrInvalidArgument)
	}
	return nil
}
