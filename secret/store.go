// Package secret keeps the daemon's secrets: values, such as API keys,
// that a team stores once (E2B's Secret API) and that the network rules
// of its sandboxes put into the headers of outgoing HTTPS requests, so
// that the value never enters a sandbox.
//
// Values are write-only: nothing in this package returns one but Value,
// which the egress proxy calls as it sets a header. They are sealed with
// AES-256-GCM under a key kept in a file of its own (Config.KeyFile, made
// at first use, readable by its owner alone); the database holds only the
// sealed bytes, each bound to its secret's id, team and version, so that
// a copy of the database without the key reveals no value, and a sealed
// value moved to another row does not open there. An update replaces the
// value and discards the old one. A Store opened with another key than
// its database was sealed under fails at Open, and says so.
//
// Secrets belong to teams: a name is unique within its team, and every
// call names the team it acts for; a secret of another team answers as
// one that does not exist.
//
// A Store is safe for concurrent use.
package secret

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lightbearco/tupper/errdefs"
)

// Config configures a Store.
type Config struct {
	// Dir holds the database (secrets.db) and, unless KeyFile says
	// otherwise, the key (secrets.key). It is made readable by its owner
	// alone when missing. Required, absolute.
	Dir string
	// KeyFile is the sealing key's file; empty means Dir/secrets.key.
	// It is made, with a random key, when neither it nor any sealed
	// value exists yet. Keep it apart from the database's backups: the
	// two together open every secret.
	KeyFile string
}

// Validate reports whether c can open a Store.
func (c *Config) Validate() error {
	if c.Dir == "" || !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("secret store: Dir %q must be an absolute path: %w", c.Dir, errdefs.ErrInvalidArgument)
	}
	if c.KeyFile != "" && !filepath.IsAbs(c.KeyFile) {
		return fmt.Errorf("secret store: KeyFile %q must be an absolute path: %w", c.KeyFile, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Info describes a secret. It never holds the value.
type Info struct {
	// ID names the secret wherever a name could change: the references
	// in sandboxes' network rules hold it.
	ID   string
	Name string
	Team string
	// Version counts the values the secret has had: 1 when created, one
	// more at each update.
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Store is the secret database.
type Store struct {
	db   *sql.DB
	seal *sealer
}

const schema = `
CREATE TABLE IF NOT EXISTS secrets (
	id         TEXT PRIMARY KEY,
	team       TEXT NOT NULL,
	name       TEXT NOT NULL,
	version    INTEGER NOT NULL,
	sealed     BLOB NOT NULL,
	metadata   TEXT NOT NULL,
	created_ns INTEGER NOT NULL,
	updated_ns INTEGER NOT NULL,
	UNIQUE (team, name)
);
CREATE INDEX IF NOT EXISTS secrets_by_team ON secrets(team, created_ns, id);
CREATE TABLE IF NOT EXISTS key_check (
	id     INTEGER PRIMARY KEY CHECK (id = 1),
	sealed BLOB NOT NULL
);
`

// Open opens (creating when missing) the store that cfg describes, and
// checks that its key is the one its values were sealed under. A missing
// key file is made only while no value is sealed yet: once one is, a
// missing or different key fails with errdefs.ErrFailedPrecondition.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.KeyFile == "" {
		cfg.KeyFile = filepath.Join(cfg.Dir, "secrets.key")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret store %s: %w", cfg.Dir, err)
	}
	path := filepath.Join(cfg.Dir, "secrets.db")
	// The file is made readable by its owner alone before SQLite opens
	// it; secure_delete overwrites what a delete or an update frees.
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600); err == nil {
		f.Close()
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("secret store %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.init(path, cfg.KeyFile); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// init makes the schema and loads (or makes) the key, checking it against
// the database's check value.
func (s *Store) init(path, keyFile string) error {
	ctx := context.Background()
	if _, err := s.db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("secret store %s: create schema: %w", path, err)
	}
	var check []byte
	err := s.db.QueryRowContext(ctx, `SELECT sealed FROM key_check WHERE id = 1`).Scan(&check)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("secret store %s: %w", path, err)
	}
	sealed := err == nil
	key, err := readKey(keyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && sealed:
		return fmt.Errorf("secret store %s: its key file %s is missing: the secrets sealed in it cannot be opened without it (restore the key file, or remove the database to start without secrets): %w", path, keyFile, errdefs.ErrFailedPrecondition)
	case errors.Is(err, fs.ErrNotExist):
		key, err = createKey(keyFile)
		if err != nil {
			return fmt.Errorf("secret store: make key file %s: %w", keyFile, err)
		}
	case err != nil:
		return fmt.Errorf("secret store: %w", err)
	}
	seal, err := newSealer(key)
	if err != nil {
		return fmt.Errorf("secret store: %w", err)
	}
	if !sealed {
		// Another process may have sealed one first: keep the first, and
		// check against it.
		if _, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO key_check(id, sealed) VALUES(1, ?)`, seal.seal(checkPlain, checkAD)); err != nil {
			return fmt.Errorf("secret store %s: %w", path, err)
		}
		if err := s.db.QueryRowContext(ctx, `SELECT sealed FROM key_check WHERE id = 1`).Scan(&check); err != nil {
			return fmt.Errorf("secret store %s: %w", path, err)
		}
	}
	if _, err := seal.open(check, checkAD); err != nil {
		return fmt.Errorf("secret store %s: the key in %s is not the one its secrets were sealed under (restore the key file that belongs with this database): %w", path, keyFile, errdefs.ErrFailedPrecondition)
	}
	s.seal = seal
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// errNotFound is the answer for a secret that does not exist, or that is
// another team's: the two read the same.
func errNotFound(ref string) error {
	return fmt.Errorf("secret %q: %w", ref, errdefs.ErrNotFound)
}

// Create stores a new secret of team, at version 1. A name the team uses
// already fails with errdefs.ErrAlreadyExists.
func (s *Store) Create(ctx context.Context, team, name, value string, md map[string]string) (*Info, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	name = CanonicalName(name)
	if err := CheckValue(value); err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	if err := CheckMetadata(md); err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	now := time.Now().UTC()
	info := &Info{ID: newID(), Name: name, Team: team, Version: 1, Metadata: orEmpty(md), CreatedAt: now, UpdatedAt: now}
	mdJSON, err := json.Marshal(info.Metadata)
	if err != nil {
		return nil, err
	}
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO secrets(id, team, name, version, sealed, metadata, created_ns, updated_ns) VALUES(?, ?, ?, ?, ?, ?, ?, ?)`,
		info.ID, team, name, info.Version, s.seal.seal([]byte(value), valueAD(info.ID, team, info.Version)),
		string(mdJSON), now.UnixNano(), now.UnixNano())
	if isConstraint(err) {
		return nil, fmt.Errorf("secret %q: the team has a secret of that name already (update it, or delete it first): %w", name, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: save: %w", name, err)
	}
	return info, nil
}

// Update replaces the value of team's secret ref (its id or name) with
// value, as its next version; md, when not nil, replaces its metadata.
// The old value is gone once Update returns.
func (s *Store) Update(ctx context.Context, team, ref, value string, md map[string]string) (*Info, error) {
	if err := CheckValue(value); err != nil {
		return nil, fmt.Errorf("secret %q: %w", ref, err)
	}
	if md != nil {
		if err := CheckMetadata(md); err != nil {
			return nil, fmt.Errorf("secret %q: %w", ref, err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	info, err := get(ctx, tx, team, ref)
	if err != nil {
		return nil, err
	}
	info.Version++
	info.UpdatedAt = time.Now().UTC()
	if md != nil {
		info.Metadata = maps.Clone(md)
	}
	mdJSON, err := json.Marshal(info.Metadata)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE secrets SET version = ?, sealed = ?, metadata = ?, updated_ns = ? WHERE id = ?`,
		info.Version, s.seal.seal([]byte(value), valueAD(info.ID, team, info.Version)), string(mdJSON), info.UpdatedAt.UnixNano(), info.ID); err != nil {
		return nil, fmt.Errorf("secret %q: save: %w", ref, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("secret %q: save: %w", ref, err)
	}
	return info, nil
}

// Get returns team's secret ref, its id or its name, or an error of class
// errdefs.ErrNotFound.
func (s *Store) Get(ctx context.Context, team, ref string) (*Info, error) {
	return get(ctx, s.db, team, ref)
}

// querier is what get reads through: the database or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const infoColumns = `id, team, name, version, metadata, created_ns, updated_ns`

func get(ctx context.Context, q querier, team, ref string) (*Info, error) {
	col, key := "name", CanonicalName(ref)
	if IsID(ref) {
		col, key = "id", ref
	}
	info, err := scanInfo(q.QueryRowContext(ctx, `SELECT `+infoColumns+` FROM secrets WHERE team = ? AND `+col+` = ?`, team, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound(ref)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: load: %w", ref, err)
	}
	return info, nil
}

func scanInfo(row interface{ Scan(...any) error }) (*Info, error) {
	var (
		info           Info
		md             string
		created, updat int64
	)
	if err := row.Scan(&info.ID, &info.Team, &info.Name, &info.Version, &md, &created, &updat); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(md), &info.Metadata); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	info.Metadata = orEmpty(info.Metadata)
	info.CreatedAt, info.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, updat).UTC()
	return &info, nil
}

// List returns up to limit of team's secrets (0: all), oldest first, and
// a token for the next page when there may be more; after is such a
// token, or empty for the first page.
func (s *Store) List(ctx context.Context, team string, limit int, after string) ([]*Info, string, error) {
	afterNs, afterID, err := decodeToken(after)
	if err != nil {
		return nil, "", err
	}
	q := `SELECT ` + infoColumns + ` FROM secrets WHERE team = ? AND (created_ns > ? OR (created_ns = ? AND id > ?)) ORDER BY created_ns, id`
	args := []any{team, afterNs, afterNs, afterID}
	if limit > 0 {
		// One more than asked tells whether there is a next page.
		q += ` LIMIT ?`
		args = append(args, limit+1)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []*Info
	for rows.Next() {
		info, err := scanInfo(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list secrets: %w", err)
	}
	next := ""
	if limit > 0 && len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = encodeToken(last.CreatedAt.UnixNano(), last.ID)
	}
	return out, next, nil
}

// Delete removes team's secret ref (its id or name) and its value. The
// network rules that use it resolve to nothing from then on.
func (s *Store) Delete(ctx context.Context, team, ref string) error {
	col, key := "name", CanonicalName(ref)
	if IsID(ref) {
		col, key = "id", ref
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE team = ? AND `+col+` = ?`, team, key)
	if err != nil {
		return fmt.Errorf("secret %q: delete: %w", ref, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound(ref)
	}
	return nil
}

// Value returns the current value of team's secret id: the one read of a
// value there is, for the egress proxy as it sets a header. A secret of
// another team, or one deleted, fails with errdefs.ErrNotFound. Its errors
// never hold the value.
func (s *Store) Value(ctx context.Context, team, id string) (string, error) {
	if !IsID(id) {
		return "", errNotFound(id)
	}
	var (
		version int64
		sealed  []byte
	)
	err := s.db.QueryRowContext(ctx, `SELECT version, sealed FROM secrets WHERE team = ? AND id = ?`, team, id).Scan(&version, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errNotFound(id)
	}
	if err != nil {
		return "", fmt.Errorf("secret %q: load: %w", id, err)
	}
	plain, err := s.seal.open(sealed, valueAD(id, team, version))
	if err != nil {
		return "", fmt.Errorf("secret %q: its sealed value does not open (was the database altered?): %w", id, errdefs.ErrFailedPrecondition)
	}
	return string(plain), nil
}

func orEmpty(md map[string]string) map[string]string {
	if md == nil {
		return map[string]string{}
	}
	return maps.Clone(md)
}

// isConstraint reports whether err is SQLite's refusal of a row that
// breaks a UNIQUE or PRIMARY KEY constraint.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// A page token is the creation time and id of the last secret of a page.
func encodeToken(ns int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(ns, 10) + ":" + id))
}

func decodeToken(tok string) (int64, string, error) {
	if tok == "" {
		return -1 << 63, "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		if n, id, ok := strings.Cut(string(raw), ":"); ok {
			if ns, err := strconv.ParseInt(n, 10, 64); err == nil {
				return ns, id, nil
			}
		}
	}
	return 0, "", fmt.Errorf("nextToken %q is not a token of this listing: %w", tok, errdefs.ErrInvalidArgument)
}
