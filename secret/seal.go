package secret

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/lightbearco/tupper/errdefs"
)

// keyBytes is the length of the sealing key: AES-256.
const keyBytes = 32

// keyFileHeader starts a key file, so that a file of another kind is
// never taken for a key.
const keyFileHeader = "tupper-secrets-key-v1 "

// sealer seals and opens values with AES-256-GCM. Each sealed value is
// bound to where it belongs (its additional data: the secret's id, team
// and version), so that a sealed value copied into another row, or kept
// from an earlier version, does not open there.
type sealer struct {
	aead cipher.AEAD
}

func newSealer(key []byte) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns a fresh random nonce followed by the ciphertext of plain.
func (s *sealer) seal(plain, ad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		// crypto/rand does not fail on the systems Go supports.
		panic(fmt.Sprintf("secret: no randomness: %v", err))
	}
	return s.aead.Seal(nonce, nonce, plain, ad)
}

// open returns the plaintext of sealed, or an error when sealed was not
// made by seal with this key and ad.
func (s *sealer) open(sealed, ad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, errors.New("sealed value is too short")
	}
	return s.aead.Open(nil, sealed[:n], sealed[n:], ad)
}

// valueAD is the additional data a secret's value is sealed with.
func valueAD(id, team string, version int64) []byte {
	return []byte("tupper secret value\x00" + id + "\x00" + team + "\x00" + strconv.FormatInt(version, 10))
}

// checkAD and checkPlain make the sealed value that tells, at Open,
// whether a key is the one the database was sealed under.
var (
	checkAD    = []byte("tupper secret key check")
	checkPlain = []byte("the key of this database")
)

// readKey reads the key file at path. It fails when the file is missing
// (fs.ErrNotExist), is not a key, or can be read by users other than its
// owner.
func readKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key file %s can be read or written by others (mode %04o): make it its owner's alone (chmod 600): %w", path, fi.Mode().Perm(), errdefs.ErrPermissionDenied)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(data), []byte(keyFileHeader))
	if !ok {
		return nil, fmt.Errorf("key file %s is not a Tupper secrets key: %w", path, errdefs.ErrInvalidArgument)
	}
	key, err := base64.StdEncoding.DecodeString(string(rest))
	if err != nil || len(key) != keyBytes {
		return nil, fmt.Errorf("key file %s does not hold a %d-byte key: %w", path, keyBytes, errdefs.ErrInvalidArgument)
	}
	return key, nil
}

// createKey makes a new random key in a new file at path, readable by its
// owner alone, and returns it. When another process made the file first,
// that one's key is returned.
func createKey(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	// Written whole under a temporary name, then linked into place: no
	// process ever reads half a key, and an existing key is never
	// replaced.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(keyFileHeader + base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKey(path)
		}
		return nil, err
	}
	return key, nil
}
