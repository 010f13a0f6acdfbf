// Package auth keeps the API keys that open `tupper serve`'s control plane.
//
// A key looks like an E2B key, "e2b_" followed by 40 hex digits, so that
// every E2B SDK accepts it. Only its SHA-256 is stored: the plaintext is
// shown once, when the key is made, and can never be read back.
//
// Every key belongs to a team (DefaultTeam unless it was made in another),
// and a key acts on its team's sandboxes only: a team is the unit of
// isolation between the users of one daemon, as on E2B.
//
// A Store is safe for concurrent use by one process. It keeps its own SQLite
// database file, apart from the engine's.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/lightbearco/tupper/errdefs"
)

// KeyPrefix starts every API key.
const KeyPrefix = "e2b_"

// keyHexLen is the number of hex digits after KeyPrefix: 20 random bytes.
const keyHexLen = 40

// lastUsedEvery is how often a key's last-used time is written at most: a
// write per request would put a synced disk write on every API call.
const lastUsedEvery = time.Minute

// DefaultTeam is the team of keys made without one, and of every key
// made before keys had teams: one team, as on E2B, so that a single user
// never meets teams at all.
const DefaultTeam = "default"

// Key describes a stored API key. It never holds the key itself.
type Key struct {
	// ID names the key for removal; it is not secret.
	ID string `json:"id"`
	// Name is a label chosen by whoever made the key; unique.
	Name string `json:"name"`
	// Team is the team the key belongs to: a key sees and touches the
	// sandboxes of its team, and only those.
	Team string `json:"team"`
	// Hint is the key's first characters ("e2b_1a2b…"), to tell keys apart.
	Hint string `json:"hint"`
	// Created is when the key was made.
	Created time.Time `json:"created"`
	// LastUsed is when the key last opened a request, to within a minute;
	// zero when never.
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// Store is the API key database.
type Store struct {
	db *sql.DB

	mu sync.Mutex
	// touched holds when each key's last-used time was last written.
	touched map[string]time.Time
}

// schema is the first version of the database; migrations (below) bring
// it up to date, counted in SQLite's user_version.
const schema = `
CREATE TABLE IF NOT EXISTS api_keys (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL UNIQUE,
	hash         TEXT NOT NULL UNIQUE,
	hint         TEXT NOT NULL,
	created_ns   INTEGER NOT NULL,
	last_used_ns INTEGER NOT NULL DEFAULT 0
);
`

// migrations[i] takes the database from user_version i to i+1.
var migrations = []string{
	// Keys belong to teams; every key made before belongs to the default one.
	`ALTER TABLE api_keys ADD COLUMN team TEXT NOT NULL DEFAULT '` + DefaultTeam + `'`,
}

// Open opens (creating when missing) the key database at path. The file
// is made readable by its owner only.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("auth: database path is empty: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("auth: key database %s: %w", path, err)
	}
	// Create the file with tight permissions before SQLite does, with its
	// umask-dependent mode: hashes are not keys, but they need not be
	// world-readable either.
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600); err == nil {
		f.Close()
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("auth: key database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("auth: key database %s: create schema: %w", path, err)
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("auth: key database %s: %w", path, err)
	}
	return &Store{db: db, touched: map[string]time.Time{}}, nil
}

// migrate brings the database's schema up to date. It holds SQLite's
// write lock while it reads the version and migrates, so that a CLI and a
// daemon opening the same database at once migrate it once.
func migrate(db *sql.DB) error {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var version int
	if err := conn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		conn.ExecContext(ctx, `ROLLBACK`)
		return fmt.Errorf("migrate: %w", err)
	}
	if version > len(migrations) {
		conn.ExecContext(ctx, `ROLLBACK`)
		return fmt.Errorf("schema version %d is newer than this tupper knows (%d): upgrade tupper", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := conn.ExecContext(ctx, migrations[i]); err != nil {
			conn.ExecContext(ctx, `ROLLBACK`)
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		conn.ExecContext(ctx, `ROLLBACK`)
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		conn.ExecContext(ctx, `ROLLBACK`)
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Create makes a new random key named name in the default team; see
// CreateInTeam.
func (s *Store) Create(ctx context.Context, name string) (string, *Key, error) {
	return s.CreateInTeam(ctx, DefaultTeam, name)
}

// CreateInTeam makes a new random key named name in team and returns its
// plaintext, which is never shown again, and its record. An empty name is
// replaced by the key's id. A name in use fails with
// errdefs.ErrAlreadyExists. A team needs no making: naming it is enough.
func (s *Store) CreateInTeam(ctx context.Context, team, name string) (string, *Key, error) {
	b := make([]byte, keyHexLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("auth: make key: %w", err)
	}
	plain := KeyPrefix + hex.EncodeToString(b)
	k, err := s.AddInTeam(ctx, team, name, plain)
	if err != nil {
		return "", nil, err
	}
	return plain, k, nil
}

// Add stores a key chosen by the caller in the default team; see
// AddInTeam.
func (s *Store) Add(ctx context.Context, name, key string) (*Key, error) {
	return s.AddInTeam(ctx, DefaultTeam, name, key)
}

// AddInTeam stores a key chosen by the caller, for example one given to
// the daemon in its environment, in team. The key must be shaped like one
// Create makes.
func (s *Store) AddInTeam(ctx context.Context, team, name, key string) (*Key, error) {
	if err := CheckFormat(key); err != nil {
		return nil, err
	}
	if err := CheckTeam(team); err != nil {
		return nil, err
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) || len(name) > 200 {
		return nil, fmt.Errorf("auth: key name %q: %w: use at most 200 printable characters", name, errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(name, "key_") {
		// Remove takes an id or a name: a name shaped like an id could
		// make it remove another key.
		return nil, fmt.Errorf("auth: key name %q: %w: names starting with key_ are kept for key ids", name, errdefs.ErrInvalidArgument)
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = id
	}
	k := &Key{ID: id, Name: name, Team: team, Hint: key[:len(KeyPrefix)+4] + "…", Created: time.Now().UTC()}
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO api_keys(id, name, team, hash, hint, created_ns) VALUES(?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Team, hashKey(key), k.Hint, k.Created.UnixNano())
	if err != nil {
		// The UNIQUE constraints are the only way an insert of fresh
		// values fails short of a broken database: tell which one.
		if taken, _ := s.exists(ctx, `name = ?`, name); taken {
			return nil, fmt.Errorf("auth: a key named %q exists already: %w", name, errdefs.ErrAlreadyExists)
		}
		if taken, _ := s.exists(ctx, `hash = ?`, hashKey(key)); taken {
			return nil, fmt.Errorf("auth: this key is stored already: %w", errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("auth: store key: %w", err)
	}
	return k, nil
}

func (s *Store) exists(ctx context.Context, where string, arg any) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys WHERE `+where, arg).Scan(&n)
	return n > 0, err
}

// List returns every key's record, oldest first.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, team, hint, created_ns, last_used_ns FROM api_keys ORDER BY created_ns, id`)
	if err != nil {
		return nil, fmt.Errorf("auth: list keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var k Key
		var created, used int64
		if err := rows.Scan(&k.ID, &k.Name, &k.Team, &k.Hint, &created, &used); err != nil {
			return nil, fmt.Errorf("auth: list keys: %w", err)
		}
		k.Created = time.Unix(0, created).UTC()
		if used != 0 {
			k.LastUsed = time.Unix(0, used).UTC()
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auth: list keys: %w", err)
	}
	return out, nil
}

// Remove deletes the key whose id or name is idOrName; the key stops
// working at once. An unknown key fails with errdefs.ErrNotFound.
func (s *Store) Remove(ctx context.Context, idOrName string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ? OR name = ?`, idOrName, idOrName)
	if err != nil {
		return fmt.Errorf("auth: remove key %q: %w", idOrName, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("auth: key %q: %w", idOrName, errdefs.ErrNotFound)
	}
	return nil
}

// Verify checks key and returns its record. A malformed, unknown or
// removed key fails with errdefs.ErrUnauthenticated; the message never
// repeats the key.
func (s *Store) Verify(ctx context.Context, key string) (*Key, error) {
	if err := CheckFormat(key); err != nil {
		return nil, fmt.Errorf("auth: %w", errdefs.ErrUnauthenticated)
	}
	want := hashKey(key)
	var k Key
	var hash string
	var created, used int64
	err := s.db.QueryRowContext(ctx,
		`SELECT id, name, team, hash, hint, created_ns, last_used_ns FROM api_keys WHERE hash = ?`, want).
		Scan(&k.ID, &k.Name, &k.Team, &hash, &k.Hint, &created, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("auth: unknown API key: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: verify key: %w", err)
	}
	// The lookup already matched, but compare in constant time anyway so
	// that a collation or index quirk can never let a near miss through.
	if subtle.ConstantTimeCompare([]byte(hash), []byte(want)) != 1 {
		return nil, fmt.Errorf("auth: unknown API key: %w", errdefs.ErrUnauthenticated)
	}
	k.Created = time.Unix(0, created).UTC()
	if used != 0 {
		k.LastUsed = time.Unix(0, used).UTC()
	}
	s.touch(ctx, &k)
	return &k, nil
}

// touch records that k was used, at most once per lastUsedEvery.
func (s *Store) touch(ctx context.Context, k *Key) {
	now := time.Now().UTC()
	s.mu.Lock()
	last, ok := s.touched[k.ID]
	if ok && now.Sub(last) < lastUsedEvery {
		s.mu.Unlock()
		return
	}
	s.touched[k.ID] = now
	s.mu.Unlock()
	// A failed write only makes LastUsed stale; the request goes on.
	if _, err := s.db.ExecContext(ctx, `UPDATE api_keys SET last_used_ns = ? WHERE id = ?`, now.UnixNano(), k.ID); err == nil {
		k.LastUsed = now
	}
}

// EnsureFirstKey makes a key named name, in the default team, when the
// store holds none, and returns its plaintext so that the daemon can print
// it once. When keys exist already it returns "" and creates nothing.
func (s *Store) EnsureFirstKey(ctx context.Context, name string) (string, error) {
	keys, err := s.List(ctx)
	if err != nil {
		return "", err
	}
	if len(keys) > 0 {
		return "", nil
	}
	plain, _, err := s.Create(ctx, name)
	return plain, err
}

// CheckFormat reports, as an errdefs.ErrInvalidArgument error, whether key
// is not shaped like a Tupper API key: "e2b_" and 40 lowercase hex digits.
func CheckFormat(key string) error {
	hexPart, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(hexPart) != keyHexLen {
		return fmt.Errorf("auth: an API key is %q followed by %d hex digits: %w", KeyPrefix, keyHexLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("auth: an API key is %q followed by %d lowercase hex digits: %w", KeyPrefix, keyHexLen, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// teamPattern is what a team name looks like: short, printable, and safe
// in logs, file names and URLs.
var teamPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckTeam reports, as an errdefs.ErrInvalidArgument error, whether team
// is not a valid team name: 1 to 63 characters of [a-z0-9._-], starting
// with a letter or digit.
func CheckTeam(team string) error {
	if !teamPattern.MatchString(team) {
		return fmt.Errorf("auth: team %q: %w: use 1 to 63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", team, errdefs.ErrInvalidArgument)
	}
	return nil
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func newID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: make key id: %w", err)
	}
	return "key_" + hex.EncodeToString(b), nil
}
